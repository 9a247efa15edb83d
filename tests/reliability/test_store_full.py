"""A store that answers but keeps nothing (issue 34, item 6): a full disk, Redis out of memory.

Requests keep getting 200 (uncompacted); `/readyz` turns 503 `store_writes_failing` once a
write fails (the reason with `?verbose`), admin deletes go through to make room, and `/readyz`
is ready again as soon as a write fits, without traffic. Real uvicorn, a real SQLite store
capped with `PRAGMA max_page_count` (SQLite's "database or disk is full") and a private
redis-server whose `maxmemory` is lowered; and a real full disk (a small tmpfs), where the
deletes use the space the SQLite store keeps in reserve (`proxy.store.sqlite_reserve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import MakeProxy, RunningProxy
from tests.reliability.conftest import RedisServer, wait_until
from tests.store.conftest import FullSQLite
from tests.support.compacted import ADMIN_KEY, admin_headers
from tests.support.fake_upstream import FakeUpstream


def turn(proxy: RunningProxy, session: str) -> None:
    """One request of a session whose state is about 30 KB (its view of the conversation,
    compressed: random text)."""
    headers = {"authorization": "Bearer sk-full", "x-session-id": session}
    messages = [{"role": "user", "content": f"{session} " + secrets.token_urlsafe(30_000)}]
    body = {"model": "gpt-4o", "messages": messages}
    answer = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    proxy.settle()


def ready(proxy: RunningProxy) -> httpx.Response:
    return httpx.get(proxy.url + "/readyz?verbose", timeout=10)


def sessions(proxy: RunningProxy) -> dict[str, str]:
    answer = httpx.get(proxy.url + "/admin/sessions", headers=admin_headers())
    assert answer.status_code == 200, answer.text
    return {row["session"]: row["id"] for row in answer.json()["data"]}


def delete(proxy: RunningProxy, session_id: str) -> httpx.Response:
    url = f"{proxy.url}/admin/sessions/{session_id}"
    return httpx.delete(url, headers=admin_headers())


def assert_writes_failing(proxy: RunningProxy, reason: str) -> None:
    answer = ready(proxy)
    assert answer.status_code == 503, answer.text
    body: dict[str, Any] = answer.json()
    assert (body["status"], body["store"]) == ("not_ready", "writes_failing")
    assert body["error"]["code"] == "store_writes_failing"
    assert reason in body["reason"] and body["store_url"]
    plain = httpx.get(proxy.url + "/readyz").json()
    assert plain["store"] == "writes_failing" and "reason" not in plain


@pytest.fixture
def full_sqlite(tmp_path: Path) -> Iterator[FullSQLite]:
    store = FullSQLite(tmp_path / "sessions.db")
    yield store
    asyncio.run(store.close())


def test_a_full_sqlite_database(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, full_sqlite: FullSQLite
) -> None:
    proxy = make_proxy(store=full_sqlite, admin_key=ADMIN_KEY)
    for session in ("a", "b", "c"):
        turn(proxy, session)
    assert ready(proxy).status_code == 200

    full_sqlite.full = True
    turn(proxy, "d")  # answered; its state is not saved
    assert "d" not in sessions(proxy)
    assert_writes_failing(proxy, "full")
    assert_writes_failing(proxy, "full")  # still full: /readyz's own write fails too

    ids = sessions(proxy)
    for session in ("a", "b"):
        answer = delete(proxy, ids[session])
        assert answer.status_code == 200, answer.text
        assert answer.json()["deleted"] is True
    assert ready(proxy).status_code == 200  # room was made: ready without another request
    turn(proxy, "d")
    assert sorted(sessions(proxy)) == ["c", "d"]


def test_redis_out_of_memory(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, redis_server: RedisServer
) -> None:
    proxy = make_proxy(store_url=redis_server.url, admin_key=ADMIN_KEY)
    turn(proxy, "a")
    turn(proxy, "b")
    assert ready(proxy).status_code == 200
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=2)
    try:
        client.config_set("maxmemory", 1)  # every write refused: used memory > 'maxmemory'
        turn(proxy, "c")
        assert_writes_failing(proxy, "maxmemory")
        ids = sessions(proxy)
        assert sorted(ids) == ["a", "b"]
        answer = delete(proxy, ids["a"])  # deletes run over maxmemory: that is making room
        assert answer.status_code == 200, answer.text
        client.config_set("maxmemory", 0)
        assert wait_until(lambda: ready(proxy).status_code == 200, 5)
        turn(proxy, "c")
        assert sorted(sessions(proxy)) == ["b", "c"]
    finally:
        client.config_set("maxmemory", 0)
        client.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MB tmpfs, unmounted at teardown (mounting needs root, as CI runs)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
        check=False,
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill(disk: Path) -> None:
    """Take every free byte of the disk."""
    with (disk / "filler").open("wb") as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()


def test_a_full_disk_sessions_are_deleted_to_make_room(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, small_disk: Path
) -> None:
    """A real full disk: SQLite's WAL cannot grow, and without the store's reserve even a
    delete failed (503). The reserve is freed for the deletes, which then make room."""
    proxy = make_proxy(store_url=f"sqlite:///{small_disk / 'sessions.db'}", admin_key=ADMIN_KEY)
    for session in ("a", "b", "c", "d"):
        turn(proxy, session)
    fill(small_disk)
    turn(proxy, "e")  # answered; nothing saved
    assert_writes_failing(proxy, "full")
    ids = sessions(proxy)
    assert sorted(ids) == ["a", "b", "c", "d"]
    for session in ("a", "b", "c"):
        answer = delete(proxy, ids[session])
        assert answer.status_code == 200, answer.text
    assert not (small_disk / "sessions.db-reserve").exists()
    assert ready(proxy).status_code == 200
    turn(proxy, "e")
    assert sorted(sessions(proxy)) == ["d", "e"]
