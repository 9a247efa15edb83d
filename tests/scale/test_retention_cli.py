"""`xun-proxy sessions ls|show|export|rm` as a real process, on SQLite and on Redis.

The store is filled directly (backdated with `put(updated_at=...)`), then the console entry
point runs as a subprocess against the store URL, as an operator or a cron job would.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proxy.session.state import SessionState
from proxy.store import SessionKey, open_store
from tests.scale.conftest import REPO, SHARED_REDIS, drop_keys
from tests.support.servers import free_port

DAY = 86400
NOW = time.time()
# (tenant, session, age in seconds); all younger than the stores' 7-day TTL
SESSIONS = [
    ("tenant-a", "old", 6 * DAY),
    ("tenant-a", "stale", 3 * DAY),
    ("tenant-b", "recent", 2 * 3600),
    ("tenant-b", "fresh", 60),
    ("tenant-a", "live", 0),
]


def key_of(tenant: str, session: str) -> SessionKey:
    return SessionKey(tenant, session)


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    prefix = f"xunscale:{os.urandom(8).hex()}:"
    url = {
        "sqlite": f"sqlite:///{tmp_path / 'sessions.db'}",
        "redis": f"{SHARED_REDIS}/14?prefix={prefix}",
    }[request.param]

    async def fill() -> None:
        store = open_store(url)
        try:
            for tenant, session, age in SESSIONS:
                state = SessionState(summary=f"summary of {session}", summary_rounds=1)
                meta = state.meta(4)
                await store.put(
                    key_of(tenant, session),
                    state.to_bytes(),
                    meta,
                    expected_version=None,
                    updated_at=NOW - age,
                )
        finally:
            await store.close()

    asyncio.run(fill())
    yield url
    if request.param == "redis":
        asyncio.run(drop_keys(f"{SHARED_REDIS}/14", prefix))


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XUN_")}
    return subprocess.run(
        [sys.executable, "-m", "proxy", "sessions", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def sessions(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line)["session"] for line in result.stdout.splitlines()]


def test_ls_filters_and_pages(store_url: str) -> None:
    ls = ("ls", "--store", store_url, "--json")
    assert sessions(cli(*ls)) == ["live", "fresh", "recent", "stale", "old"]
    assert sessions(cli(*ls, "--tenant", "tenant-a")) == ["live", "stale", "old"]
    since = datetime.fromtimestamp(NOW - DAY, UTC).isoformat()
    assert sessions(cli(*ls, "--since", since)) == ["live", "fresh", "recent"]
    assert sessions(cli(*ls, "--older-than", "2d")) == ["stale", "old"]
    assert sessions(cli(*ls, "--older-than", "1h", "--tenant", "tenant-b")) == ["recent"]
    first = cli(*ls, "--limit", "2")
    assert sessions(first) == ["live", "fresh"] and "more: --cursor" in first.stderr
    assert sessions(cli(*ls, "--limit", "2", "--all")) == [
        "live",
        "fresh",
        "recent",
        "stale",
        "old",
    ]
    table = cli("ls", "--store", store_url)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:3] == ["id", "tenant", "session"]


def test_show_and_export(store_url: str, tmp_path: Path) -> None:
    key = key_of("tenant-a", "live")
    shown = cli("show", key.id, "--store", store_url)
    assert shown.returncode == 0
    detail = json.loads(shown.stdout)
    assert detail["state"]["summary"] == "summary of live" and detail["version"] == 1
    raw = cli("export", key.id, "--store", store_url)
    assert json.loads(raw.stdout)["summary"] == "summary of live"

    target = tmp_path / "tenant-a.jsonl"
    bulk = cli("export", "--all", "--tenant", "tenant-a", "--store", store_url, "-o", str(target))
    assert bulk.returncode == 0 and "exported 3 sessions" in bulk.stderr
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["session"] for r in rows] == ["live", "stale", "old"]
    assert all(r["state"]["summary"] == f"summary of {r['session']}" for r in rows)
    assert {r["id"] for r in rows} == {key_of("tenant-a", s).id for s in ("live", "stale", "old")}
    assert cli("export", "--store", store_url).returncode == 2  # an id or --all


def test_rm_retention(store_url: str) -> None:
    ls = ("ls", "--store", store_url, "--json")
    dry = cli("rm", "--older-than", "48h", "--dry-run", "--store", store_url)
    assert dry.returncode == 0 and dry.stdout.count("would delete") == 2
    assert len(sessions(cli(*ls))) == 5

    old = cli("rm", "--older-than", "5d", "--store", store_url)
    assert old.returncode == 0
    assert old.stdout.splitlines() == [f"deleted {key_of('tenant-a', 'old').id}"]
    assert sessions(cli(*ls)) == ["live", "fresh", "recent", "stale"]

    refused = cli("rm", "--all", "--store", store_url)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert len(sessions(cli(*ls))) == 4

    tenant_b = cli("rm", "--all", "--yes", "--tenant", "tenant-b", "--store", store_url)
    assert tenant_b.returncode == 0 and "deleted 2 sessions" in tenant_b.stderr
    assert sessions(cli(*ls)) == ["live", "stale"]

    one = cli("rm", key_of("tenant-a", "stale").id, "nosuchid", "--store", store_url)
    assert one.returncode == 1 and "no session nosuchid" in one.stderr
    everything = cli("rm", "--all", "--yes", "--store", store_url)
    assert everything.returncode == 0 and "deleted 1 sessions" in everything.stderr
    assert sessions(cli(*ls)) == []


def test_bad_arguments_and_unreachable_store(store_url: str) -> None:
    for argv in (
        ("ls", "--older-than", "soon"),
        ("ls", "--since", "yesterday"),
        ("rm", "--store", store_url),
        ("rm", "someid", "--all", "--yes"),
    ):
        result = cli(*argv, "--store", store_url) if "--store" not in argv else cli(*argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert result.stderr.startswith("xun-proxy:"), result.stderr
    down = f"redis://127.0.0.1:{free_port()}/0"
    result = cli("ls", "--store", down)
    assert result.returncode == 1 and "store failed" in result.stderr
    assert "Traceback" not in result.stderr
