"""A store that answers but keeps nothing (issue 34, item 6): a full disk, Redis out of memory.

Requests keep getting 200 (uncompacted); `/readyz` turns 503 `store_writes_failing` once a
write fails (the reason with `?verbose`), admin deletes go through to make room, and `/readyz`
is ready again as soon as a write fits, without traffic. Real uvicorn, a real SQLite store
capped with `PRAGMA max_page_count` (SQLite's "database or disk is full") and a private
redis-server whose `maxmemory` is lowered.
"""

from __future__ import annotations

import asyncio
import secrets
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
