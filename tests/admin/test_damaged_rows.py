"""A stored session whose metadata cannot be read (issue 34, item 3), under a running proxy.

Only that session is affected: the admin list and the savings answer 200 without it, its own
detail says it is damaged (a delete goes through), `xun-proxy sessions ls` and `xun-proxy
report` exit 0 and list the others, the log names it, and its next request starts it afresh
(compacted, and the row rewritten whole). Real uvicorn, SQLite and Redis stores, the fake upstream.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from proxy.cli import main
from proxy.compact import placeholder_for
from tests.conftest import MakeProxy, RunningProxy
from tests.store.conftest import REDIS_URL
from tests.support.compacted import ADMIN_KEY, admin_headers
from tests.support.fake_upstream import FakeUpstream

TENANT_KEY = "sk-damaged-rows"
CALL = {"id": "call_0", "type": "function", "function": {"name": "read", "arguments": "{}"}}


def history(results: int) -> list[dict[str, Any]]:
    """A chat history with `results` tool results of 400 characters each."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read the files"}]
    for n in range(results):
        call = CALL | {"id": f"call_{n}"}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f"{n}" * 400})
    return messages


def chat(proxy: RunningProxy, session: str, messages: list[dict[str, Any]]) -> httpx.Response:
    headers = {"authorization": f"Bearer {TENANT_KEY}", "x-session-id": session}
    body = {"model": "gpt-4o", "messages": messages}
    response = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response


class Backend:
    """Where the proxy stores sessions, and how to damage one row's metadata there."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.db = tmp_path / "sessions.db"
        self.prefix = f"xuntest:{uuid.uuid4().hex}:"
        self.url = (
            f"sqlite:///{self.db}" if kind == "sqlite" else f"{REDIS_URL}?prefix={self.prefix}"
        )

    def damage(self, session_id: str) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.db) as conn:
                conn.execute("UPDATE sessions SET meta = '{not json' WHERE id = ?", (session_id,))
            return
        client = redis.Redis.from_url(REDIS_URL)
        try:
            suffix = client.hget(f"{self.prefix}ids", session_id)
            assert isinstance(suffix, bytes)
            client.hset(f"{self.prefix}session:{suffix.decode()}", "meta", b"\xff{")
        finally:
            client.close()

    def drop(self) -> None:
        if self.kind == "redis":
            client = redis.Redis.from_url(REDIS_URL)
            try:
                keys = list(client.scan_iter(match=f"{self.prefix}*"))
                if keys:
                    client.delete(*keys)
            finally:
                client.close()


@pytest.fixture(params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    where = Backend(str(request.param), tmp_path)
    yield where
    where.drop()


def admin(proxy: RunningProxy, path: str) -> httpx.Response:
    return httpx.get(proxy.url + path, headers=admin_headers())


def test_a_damaged_row_is_skipped_and_its_session_starts_afresh(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    backend: Backend,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy = make_proxy(
        store_url=backend.url,
        admin_key=ADMIN_KEY,
        token_threshold=600,
        toolcall_keep_max=1,
        store_cache_entries=0,  # every read goes to the store (a cache would keep a good copy)
    )
    chat(proxy, "damaged", history(1))
    chat(proxy, "healthy", history(1))
    proxy.settle()
    listed = admin(proxy, "/admin/sessions").json()["data"]
    ids = {row["session"]: row["id"] for row in listed}
    damaged = ids["damaged"]
    backend.damage(damaged)
    caplog.set_level(logging.WARNING, logger="proxy.store")

    # Listings and reports answer, without the damaged row, and the log names it.
    answer = admin(proxy, "/admin/sessions")
    assert answer.status_code == 200, answer.text
    assert [row["session"] for row in answer.json()["data"]] == ["healthy"]
    savings = admin(proxy, "/admin/savings")
    assert savings.status_code == 200, savings.text
    detail = admin(proxy, f"/admin/sessions/{damaged}")
    assert detail.status_code == 500 and detail.json()["error"]["code"] == "state_unreadable"
    assert "damaged" in detail.json()["error"]["message"]
    assert admin(proxy, f"/admin/sessions/{ids['healthy']}").status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(damaged in line for line in warnings), warnings

    assert main(["sessions", "ls", "--store", backend.url, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["session"] for row in rows] == ["healthy"]
    assert main(["report", "--store", backend.url, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["sessions", "show", damaged, "--store", backend.url]) == 0
    assert json.loads(capsys.readouterr().out)["damaged"] == "metadata unreadable"

    # Its next request starts afresh: compacted as a new session would be, and saved whole.
    response = chat(proxy, "damaged", history(10))
    assert response.headers["x-xun-compaction"] == "toolcall"
    sent = fake_upstream.chat_requests[-1].json["messages"]
    assert placeholder_for("call_0") in [m["content"] for m in sent if m["role"] == "tool"]
    proxy.settle()
    again = admin(proxy, f"/admin/sessions/{damaged}")
    assert again.status_code == 200, again.text
    listed = admin(proxy, "/admin/sessions").json()["data"]
    assert sorted(row["session"] for row in listed) == ["damaged", "healthy"]

    # A damaged row can be deleted through the admin API as well.
    backend.damage(ids["healthy"])
    gone = httpx.delete(f"{proxy.url}/admin/sessions/{ids['healthy']}", headers=admin_headers())
    assert gone.status_code == 200, gone.text
    assert gone.json()["deleted"] is True
    assert [row["session"] for row in admin(proxy, "/admin/sessions").json()["data"]] == ["damaged"]
