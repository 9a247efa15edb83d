"""Shared plumbing of the benchmarks: machine facts, child processes, stats, tables, results.

Every server a benchmark starts is a child process on 127.0.0.1 that it stops itself (by its
own pid, terminate then kill); every loop is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
CACHE = Path(os.environ.get("XUN_BENCH_CACHE") or Path.home() / ".cache" / "xun-bench")
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the machine is shared: read ratios, not absolutes)."""
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem = round(int(first.split()[1]) / 2**20, 1)
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": load,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def git_commit(where: Path = ROOT) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def rnd(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (also readable on a terminal)."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


def read_result(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def run_dir(name: str) -> Path:
    """A fresh scratch folder for logs and stores, outside the repository."""
    path = CACHE / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Child:
    """A server the benchmark started: its command, log and base URL."""

    name: str
    argv: list[str]
    port: int
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = ROOT  # some peers write files into their working directory
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> Child:
        env = {**os.environ, **self.env}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def wait_ready(self, path: str = "/", timeout: float = 60.0) -> None:
        """Poll until an HTTP answer below 500 comes back; raise with the log's tail if not."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            try:
                resp = httpx.get(self.url + path, timeout=2.0)
                if resp.status_code < 500:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s ({last}): {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # Our own child only, by pid; its session group holds any workers it forked.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def rss_mib(self) -> float | None:
        if self.proc is None:
            return None
        return rss_mib(self.proc.pid)


def rss_mib(pid: int) -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


@contextlib.contextmanager
def running(children: Sequence[Child]) -> Iterator[None]:
    try:
        yield
    finally:
        for child in reversed(children):
            child.stop()


def fast_upstream(scratch: Path) -> Child:
    """The benchmarks' instant fake upstream (`tests.bench.fast_upstream`), not yet started."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.bench.fast_upstream", "--port", str(port)]
    return Child("fast-upstream", argv, port, scratch / "upstream.log")


def xun_proxy(
    name: str,
    upstream: str,
    scratch: Path,
    *,
    python: str = sys.executable,
    patches: str = "",
    module: str | None = None,
    **flags: Any,
) -> Child:
    """`python -m proxy serve` on a free port, logs in `scratch`; with `patches`, the same
    command through `tests.bench.patched` (experimental hot-path changes, see there); with
    `module`, through that module (`tests.bench.clocked`: the replay's clock)."""
    port = free_port()
    module = module or ("tests.bench.patched" if patches else "proxy")
    argv = [python, "-m", module, "serve", "--upstream", upstream, "--port", str(port)]
    env: dict[str, str] = {"XUN_BENCH_PATCHES": patches} if patches else {}
    for key, value in flags.items():
        if key == "compactor":
            env["XUN_COMPACTOR"] = str(value)  # the config key auto_compact.compactor
            continue
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return Child(name, argv, port, scratch / f"{name}.log", env=env)


def print_header(title: str) -> None:
    print(f"\n## {title}\n", flush=True)
