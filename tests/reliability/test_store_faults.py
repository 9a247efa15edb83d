"""The session store failing under a running proxy: requests keep flowing.

SQLite locked by another connection or read-only, Redis going down and coming back. A store
failure only costs compaction (the request goes upstream uncompacted); it never fails the
client's request, and writes resume once the store is back.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from proxy.session.state import SessionState
from proxy.turn.persist import SETTLE_WAIT_S
from tests.conftest import MakeProxy
from tests.reliability.conftest import RedisServer, SpawnProxy
from tests.support.fake_upstream import FakeUpstream

HEADERS = {"authorization": "Bearer sk-store", "x-session-id": "store-1"}


class Conversation:
    """A growing chat history sent turn by turn, streaming or not, with timing."""

    def __init__(self, proxy: Any) -> None:
        self.url = proxy.base_url + "/chat/completions"
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]

    def turn(self, *, stream: bool = False, budget: float = 15.0) -> httpx.Response:
        started = time.monotonic()
        body = {"model": "gpt-4o", "messages": self.messages, "stream": stream}
        response = httpx.post(self.url, json=body, headers=HEADERS, timeout=30)
        assert time.monotonic() - started < budget
        assert response.status_code == 200, response.text
        if stream:
            assert response.content.endswith(b"data: [DONE]\n\n")
        self.messages = [
            *self.messages,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"turn {len(self.messages)}"},
        ]
        return response


def sqlite_rows(db: Path, *, immutable: bool = False) -> list[tuple[int, SessionState]]:
    # immutable=1 reads the file as it is, without creating -wal/-shm beside it.
    with sqlite3.connect(
        f"file:{db}?{'immutable=1' if immutable else 'mode=ro'}", uri=True
    ) as conn:
        rows = conn.execute("SELECT version, data FROM sessions").fetchall()
    return [(int(v), SessionState.from_bytes(bytes(d))) for v, d in rows]


def test_sqlite_locked_by_another_connection(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    db = tmp_path / "locked.db"
    proxy = make_proxy(store_url=f"sqlite:///{db}")
    chat = Conversation(proxy)
    chat.turn()
    proxy.settle()
    [(version, _)] = sqlite_rows(db)
    holder = sqlite3.connect(db, isolation_level=None, timeout=5)
    locked_latency: list[float] = []
    try:
        # Another process holds the write lock. No answer waits for it: a turn's save is
        # written after its answer went out, the first waits out SQLite's busy timeout (5 s)
        # and fails, and the session's next requests wait at most `SETTLE_WAIT_S` for the
        # saves before them, then read what is stored (proxy.turn.persist).
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE sessions SET meta = meta")
        for stream in (False, True, False, True):
            started = time.monotonic()
            response = chat.turn(stream=stream)
            assert response.headers["x-xun-session"]
            locked_latency.append(time.monotonic() - started)
        assert sqlite_rows(db)[0][0] == version  # nothing was written meanwhile
        assert locked_latency[0] < 1, locked_latency  # the answer did not wait for the write
        # At most the settle wait (1 s), never SQLite's 5 s busy timeout.
        assert max(locked_latency) < SETTLE_WAIT_S + 3, locked_latency
    finally:
        holder.rollback() if holder.in_transaction else None
        holder.close()
    chat.turn()  # the lock is gone: the state is written again
    proxy.settle()
    [(after, state)] = sqlite_rows(db)
    assert after > version
    assert state.prefix_len == len(chat.messages) - 2
    print(f"latency while the SQLite file was locked: {locked_latency}")


# File permissions do not bind root (the tests run as root in CI): a proxy on a read-only
# file then runs without the capabilities that let root write anyway (util-linux setpriv).
WITHOUT_ROOTS_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[list[Path]]:
    """Paths to make read-only (a folder 0555, a file 0444), writable again at teardown."""
    marked: list[Path] = []
    try:
        yield marked
    finally:
        for path in marked:
            path.chmod(0o755 if path.is_dir() else 0o644)


def files_in(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("how", ["mode=ro URL", "read-only file"])
def test_sqlite_read_only(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    spawn_proxy: SpawnProxy,
    tmp_path: Path,
    read_only: list[Path],
    how: str,
) -> None:
    db = tmp_path / "store" / "ro.db"
    first = make_proxy(store_url=f"sqlite:///{db}")
    chat = Conversation(first)
    chat.turn()
    first.stop()
    before = files_in(db.parent)
    proxy: Any
    if how == "read-only file":
        # The file, whatever lies beside it, and its folder: no journal can be made either.
        for path in [*db.parent.iterdir(), db.parent]:
            path.chmod(0o555 if path.is_dir() else 0o444)
            read_only.append(path)
        wrapper = WITHOUT_ROOTS_OVERRIDE if os.geteuid() == 0 else []
        proxy = spawn_proxy(upstream=fake_upstream.url, store=f"sqlite:///{db}", wrapper=wrapper)
    else:
        proxy = make_proxy(store_url=f"sqlite:///{db}?mode=ro")
    chat.url = proxy.base_url + "/chat/completions"
    for stream in (False, True, False):
        chat.turn(stream=stream)
    proxy.stop()
    after = files_in(db.parent)
    assert after[db.name] == before[db.name]
    assert len(after.get(f"{db.name}-wal", b"")) <= 32  # no frame in the WAL: nothing written
    if how == "read-only file":
        assert after == before  # nor any file made beside it
    [(_, state)] = sqlite_rows(db, immutable=True)
    assert state.prefix_len == 1  # still the first turn's state, intact
    assert len(fake_upstream.chat_requests) == 4  # every turn was answered through the proxy


def redis_states(server: RedisServer) -> list[SessionState]:
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)
    try:
        keys = client.keys("xun:session:*")
        return [SessionState.from_bytes(client.hget(k, "data")) for k in keys]  # type: ignore[arg-type]
    finally:
        client.close()


def test_redis_down_and_back(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, redis_server: RedisServer
) -> None:
    proxy = make_proxy(store_url=redis_server.url)
    chat = Conversation(proxy)
    chat.turn()
    proxy.settle()
    assert [s.prefix_len for s in redis_states(redis_server)] == [1]
    assert httpx.get(proxy.url + "/readyz").status_code == 200

    redis_server.stop()
    for stream in (False, True, False, True):
        chat.turn(stream=stream, budget=5.0)  # Redis timeouts are short: no stall
    ready = httpx.get(proxy.url + "/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "store_down"

    redis_server.start()  # same port, empty (no persistence)
    chat.turn()
    chat.turn(stream=True)
    assert httpx.get(proxy.url + "/readyz").status_code == 200
    proxy.settle()
    [state] = redis_states(redis_server)
    assert state.prefix_len == len(chat.messages) - 2
