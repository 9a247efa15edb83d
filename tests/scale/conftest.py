"""Fixtures for the scale-out tests: real proxy processes, real Redis servers, store URLs.

`ProxyProcess` runs `python -m proxy serve` as a child process (what a replica is);
`RedisServer` runs a private `redis-server` on a free port that a test may stop, pause and
restart. Tests that use the shared Redis on 127.0.0.1:6379 take db 13 or 14 and a unique key
prefix, and delete only their own keys.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from tests.support.servers import free_port

SHARED_REDIS = "redis://127.0.0.1:6379"
REPO = Path(__file__).resolve().parents[2]


async def drop_keys(url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


@pytest.fixture
async def redis_store_url() -> AsyncIterator[str]:
    """redis://127.0.0.1:6379/13?prefix=<unique>: a private namespace on the shared server."""
    prefix = f"xunscale:{uuid.uuid4().hex}:"
    yield f"{SHARED_REDIS}/13?prefix={prefix}"
    await drop_keys(f"{SHARED_REDIS}/13", prefix)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        url: str = request.getfixturevalue("redis_store_url")
        yield url


def rss_kib(pid: int) -> int:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class ProxyProcess:
    """`python -m proxy serve ...` on a free port, stopped with SIGTERM (then SIGKILL)."""

    def __init__(
        self,
        *,
        store: str,
        upstream: str,
        threshold: int,
        log_path: Path,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.argv = [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--store",
            store,
            "--upstream",
            upstream,
            "--port",
            str(self.port),
            "--token-threshold",
            str(threshold),
            "--log-level",
            "warning",
            *(extra or []),
        ]
        # The seed's compactor, whose rules these tests follow, with its summaries made at the
        # crossing turn (not written ahead), unless `env` says otherwise.
        self.env = {
            **os.environ,
            "XUN_COMPACTOR": "seed",
            "XUN_SUMMARY_AHEAD": "off",
            **(env or {}),
        }
        self.env.pop("XUN_CONFIG", None)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ProxyProcess:
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        finally:
            log.close()

        def healthy() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"proxy exited: {self.log_path.read_text()[-2000:]}")
            try:
                return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 20, "the proxy process to answer")
        return self

    def readyz(self, **params: Any) -> httpx.Response:
        return httpx.get(self.url + "/readyz", params=params, timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


@pytest.fixture
def proxy_processes(tmp_path: Path) -> Iterator[Callable[..., ProxyProcess]]:
    started: list[ProxyProcess] = []

    def start(**kwargs: Any) -> ProxyProcess:
        kwargs.setdefault("log_path", tmp_path / f"proxy-{len(started)}.log")
        proc = ProxyProcess(**kwargs)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


class RedisServer:
    """A private redis-server on a free port, no persistence: a restart starts it empty."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (run .ci/run)")
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                sock.settimeout(0.5)
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> RedisServer:
        argv = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, 10, "redis-server to answer")
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot exit otherwise
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()
