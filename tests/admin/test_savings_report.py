"""The savings report (proxy.admin.savings_report) read from each store: memory, SQLite and Redis,
and `xun-proxy report` on a Redis store. The states are hand-made: two tenants, two models,
turns in two hours, and one shadow turn whose projected saving stays apart."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.admin.savings_report import report, when
from proxy.cli import main
from proxy.compaction.prices import Prices
from proxy.session.savings_record import HOUR, Tokens, fold, turn_savings
from proxy.session.state import SessionState
from proxy.store import SessionKey, Store, open_store
from tests.store.conftest import REDIS_URL, drop_prefix

NOW = 1_000 * HOUR + 1800.0  # half past an hour


def turn(model: str, sent: int, direct: int) -> dict[str, Any]:
    return turn_savings(
        model, [Tokens(sent)], [], direct, previous_direct=None, appended=False, caches=False
    )


def state_of(*records: dict[str, Any]) -> bytes:
    state = SessionState()
    for record in records:
        fold(state.savings, record)
    return state.to_bytes()


SESSIONS = {
    SessionKey("tenant-a", "s1"): state_of(
        {"at": NOW - 2 * HOUR, "savings": turn("gpt-4o", 1000, 1500)},  # before a 1h window
        {"at": NOW - 60, "savings": turn("gpt-4o", 1000, 3000)},
        {"at": NOW - 30, "savings": turn("local-model", 100, 400)},
    ),
    SessionKey("tenant-b", "s2"): state_of(
        {"at": NOW - 10, "savings": turn("gpt-4o", 2000, 2500)},
        {
            "at": NOW - 5,
            "savings": turn("gpt-4o", 8000, 8000),
            "shadow": True,
            "projected_prompt_tokens": 3000,
        },
    ),
}


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def filled(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Store, str]]:
    prefix = f"xuntest:{uuid.uuid4().hex}:"
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'sessions.db'}",
        "redis": f"{REDIS_URL}?prefix={prefix}",
    }[request.param]
    store = open_store(url)
    for key, data in SESSIONS.items():
        await store.put(key, data, {"wire": "chat"}, expected_version=None, updated_at=NOW - 1)
    try:
        yield store, url
    finally:
        await store.close()
        if request.param == "redis":
            await drop_prefix(prefix)


async def test_totals_groups_series_and_projected_from_every_store(
    filled: tuple[Store, str],
) -> None:
    store, _ = filled
    body = await report(store, Prices(), by="model", now=lambda: NOW)
    totals = body["totals"]
    assert totals["requests"] == 4
    assert totals["prompt_tokens_sent"] == 1000 + 1000 + 100 + 2000
    assert totals["tokens_saved"] == 500 + 2000 + 300 + 500
    assert totals["unpriced_requests"] == 1  # local-model has no price: its tokens still count
    assert totals["cost_saved"] == pytest.approx((500 + 2000 + 500) * 2.5 / 1e6)
    groups = {g["key"]: g for g in body["groups"]}
    assert groups["gpt-4o"]["tokens_saved"] == 3000
    assert groups["local-model"]["cost_saved"] is None
    assert [p["t"] for p in body["series"]] == [998 * HOUR, 1000 * HOUR]
    # The shadow turn is projected only: never among the real savings.
    assert body["projected"] == {
        "requests": 1,
        "prompt_tokens_direct": 8000,
        "prompt_tokens_projected": 3000,
        "tokens_saved": 5000,
        "cost_saved": pytest.approx(5000 * 2.5 / 1e6),
    }

    window = await report(store, Prices(), since=NOW - 1800, by="tenant", now=lambda: NOW)
    tenants = {g["key"]: g["tokens_saved"] for g in window["groups"]}
    assert tenants == {"tenant-a": 2300, "tenant-b": 500}
    assert window["groups"][0]["key"] == "tenant-a"  # the largest saving first
    sessions = await report(store, Prices(), by="session", until=NOW - HOUR, now=lambda: NOW)
    assert [(g["session"], g["tokens_saved"]) for g in sessions["groups"]] == [("s1", 500)]


async def test_the_report_command_reads_a_redis_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"xuntest:{uuid.uuid4().hex}:"
    url = f"{REDIS_URL}?prefix={prefix}"
    store = open_store(url)
    try:
        for key, data in SESSIONS.items():
            await store.put(key, data, {}, expected_version=None)
    finally:
        await store.close()
    try:
        code = await asyncio.to_thread(
            main, ["report", "--store", url, "--format", "json", "--by", "tenant"]
        )
        assert code == 0
        body = json.loads(capsys.readouterr().out)
        assert body["totals"]["tokens_saved"] == 3300 and body["projected"]["tokens_saved"] == 5000
        code = await asyncio.to_thread(main, ["report", "--store", url])
        table = capsys.readouterr().out
        assert code == 0 and "TOTAL" in table and "gpt-4o" in table
        assert "projected (shadow turns, not included above): 1 requests" in table
        assert await asyncio.to_thread(main, ["report", "--store", url, "--since", "soon"]) == 2
    finally:
        await drop_prefix(prefix)


def test_window_ends_read_as_ages_iso_or_epoch() -> None:
    assert when("24h", now=NOW, naive_is_utc=False) == NOW - 86400
    assert when("2026-01-01T00:00:00Z", now=NOW, naive_is_utc=False) == 1767225600.0
    assert when("1767225600", now=NOW, naive_is_utc=False) == 1767225600.0
    assert when(None, now=NOW, naive_is_utc=False) is None
    with pytest.raises(ValueError):
        when("2026-01-01T00:00:00", now=NOW, naive_is_utc=False)  # the API wants an offset
