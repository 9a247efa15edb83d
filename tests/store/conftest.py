"""Store fixtures: one factory per backend, so the contract suite runs against all of them.

Redis tests use db 15 and a unique key prefix per test, and delete only their own keys. When
no Redis answers on 127.0.0.1:6379 they fail rather than skip: CI starts a redis-server.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.store import SessionKey, Store, open_store
from proxy.store.cache import CachedStore
from proxy.store.redis_layout import key_part
from proxy.store.sqlite import SQLiteStore

REDIS_URL = "redis://127.0.0.1:6379/15"
# "cached-*": the same store behind the bounded in-process cache the server puts in front of it.
BACKENDS = ["memory", "sqlite", "redis", "cached-sqlite", "cached-redis"]

MakeStore = Callable[..., Awaitable[Store]]


async def drop_prefix(prefix: str) -> None:
    """Delete this test's Redis keys (and only those); fails loudly when Redis is down."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        await client.ping()  # no Redis: the test errors, it is not skipped
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    prefix = f"xuntest:{uuid.uuid4().hex}:"
    yield prefix
    await drop_prefix(prefix)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_prefix() -> str:
    """The Redis key prefix of the test's stores."""
    return f"xuntest:{uuid.uuid4().hex}:"


@pytest.fixture
async def make_store(backend: str, tmp_path: Path, store_prefix: str) -> AsyncIterator[MakeStore]:
    """Open a store of the test's backend; SQLite and Redis instances share the same data."""
    opened: list[Store] = []
    prefix = store_prefix
    cached = backend.startswith("cached-")
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'sessions.db'}",
        "redis": f"{REDIS_URL}?prefix={prefix}",
    }[backend.removeprefix("cached-")]

    async def make(**kwargs: Any) -> Store:
        store = open_store(url, **kwargs)
        if cached:
            store = CachedStore(store, max_entries=8, max_bytes=64 * 1024)
        opened.append(store)
        return store

    try:
        yield make
    finally:
        for store in opened:
            await store.close()
        if backend.endswith("redis"):
            await drop_prefix(prefix)


@pytest.fixture
async def store(make_store: MakeStore) -> Store:
    return await make_store()


DamageMeta = Callable[[SessionKey, bytes | None], Awaitable[None]]


@pytest.fixture
def damage_meta(backend: str, tmp_path: Path, store_prefix: str) -> DamageMeta:
    """Overwrite a stored session's metadata behind the store's back, as a damaged disk or a
    foreign writer would: with `raw` (any bytes), or none at all (None: an empty SQLite
    column, a Redis hash without the field). The version stays as it was."""

    async def damage(key: SessionKey, raw: bytes | None) -> None:
        if backend.endswith("sqlite"):
            with sqlite3.connect(tmp_path / "sessions.db") as conn:
                value = b"" if raw is None else raw
                conn.execute("UPDATE sessions SET meta = ? WHERE id = ?", (value, key.id))
            return
        client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        try:
            name = f"{store_prefix}session:{key_part(key.tenant)}:{key_part(key.session)}"
            assert await client.exists(name)
            if raw is None:
                await client.hdel(name, "meta")
            else:
                await client.hset(name, "meta", raw)
        finally:
            await client.aclose()

    return damage


class FullSQLite(SQLiteStore):
    """A real SQLite store whose database may grow no further once `full` is set: `PRAGMA
    max_page_count` on the worker's connection (it is per connection, so every write goes to
    the worker), and SQLite answers SQLITE_FULL, "database or disk is full", as it does
    when the disk is full. Pages freed by deletes are used again."""

    full = False

    def _call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._conn is not None:  # below the current size it caps at the current size
            self._conn.execute(f"PRAGMA max_page_count = {1 if self.full else 2**30}")
        return super()._call(fn)

    def _inline_write_allowed(self, size: int) -> bool:
        return False
