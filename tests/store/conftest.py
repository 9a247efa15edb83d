"""Store fixtures: one factory per backend, so the contract suite runs against all of them.

Redis tests use db 15 and a unique key prefix per test, and delete only their own keys. When
no Redis answers on 127.0.0.1:6379 they fail rather than skip: CI starts a redis-server.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.store import Store, open_store
from proxy.store.cache import CachedStore

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
async def make_store(backend: str, tmp_path: Path) -> AsyncIterator[MakeStore]:
    """Open a store of the test's backend; SQLite and Redis instances share the same data."""
    opened: list[Store] = []
    prefix = f"xuntest:{uuid.uuid4().hex}:"
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
