"""Real processes for the fault and abuse suite: the proxy as `python -m proxy serve`, and a
private redis-server that a test can stop and start again.

Both always go away at teardown (SIGTERM, then SIGKILL), and every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.agent import Agent, ModelScript
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    """Poll `predicate` until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


@dataclass
class ProxyProcess:
    """`python -m proxy serve` on a free loopback port; its stdout+stderr go to `log_path`."""

    env: dict[str, str]
    log_path: Path
    args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # A command the proxy runs under (it execs the proxy: the pid stays the proxy's).
    wrapper: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30.0) -> ProxyProcess:
        command = [sys.executable, "-m", "proxy", "serve", "--port", str(self.port), *self.args]
        command = [*self.wrapper, *command]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"proxy exited early:\n{self.logs().decode(errors='replace')}")
            try:
                return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        if not wait_until(healthy, timeout, step=0.05):
            raise RuntimeError("proxy did not become healthy")
        return self

    def logs(self) -> bytes:
        return self.log_path.read_bytes() if self.log_path.exists() else b""

    def settle(self) -> None:
        """Wait until the proxy's saves have landed (a turn's last save is written just after
        its answer went out): its admin session list waits for them before it answers."""
        key = self.env.get("XUN_ADMIN_KEY")
        headers = {"authorization": f"Bearer {key}"} if key else {}
        resp = httpx.get(self.url + "/admin/sessions", headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill9()

    def rss_kib(self) -> int:
        """Resident set size from /proc (Linux)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")


SpawnProxy = Callable[..., ProxyProcess]


def proxy_env(**settings: Any) -> dict[str, str]:
    """The environment with every XUN_ variable replaced by `settings` (XUN_<NAME upper>)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XUN_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["XUN_COMPACTOR"] = "seed"  # these tests follow the seed's rules; a setting overrides it
    env["XUN_SUMMARY_AHEAD"] = "off"  # and its summaries at the crossing turn, as they expect
    for name, value in settings.items():
        if value is not None:
            env[f"XUN_{name.upper()}"] = str(value)
    return env


@pytest.fixture
def spawn_proxy(tmp_path: Path) -> Iterator[SpawnProxy]:
    """`spawn_proxy(*args, start=True, wrapper=None, **xun_settings) -> ProxyProcess`; all
    stopped at teardown.

    Settings go in as environment variables (`upstream="..."` sets XUN_UPSTREAM); the store
    defaults to memory:// and the log level to info. `wrapper`: a command the proxy runs under.
    """
    running: list[ProxyProcess] = []

    def spawn(
        *args: str, start: bool = True, wrapper: list[str] | None = None, **settings: Any
    ) -> ProxyProcess:
        settings.setdefault("store", "memory://")
        settings.setdefault("log_level", "info")
        log_path = tmp_path / f"proxy-{len(running)}.log"
        env = proxy_env(**settings)
        proc = ProxyProcess(env, log_path, list(args), wrapper=list(wrapper or []))
        running.append(proc)
        return proc.start() if start else proc

    try:
        yield spawn
    finally:
        for proc in running:
            proc.stop()


@dataclass
class RedisServer:
    """A private redis-server on a free port (no persistence) that can go down and come back."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        self.process = subprocess.Popen(
            [*command, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not wait_until(self.answers, 10):
            raise RuntimeError("redis-server did not start")
        return self

    def answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


def compacted_agent(fake: FakeUpstream, proxy: Any, client: openai.OpenAI) -> Agent:
    """An agent whose session has compacted tool results, so the extract tool is injected."""
    fake.default = ModelScript()
    agent = Agent(client, output_size=2000)
    for _ in range(40):
        agent.step()
        if agent.responses[-1].headers["x-xun-compaction"] != "none":
            break
    fake.default = None
    assert agent.responses[-1].headers["x-xun-compaction"] != "none"
    return agent
