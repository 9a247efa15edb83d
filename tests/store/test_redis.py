"""Redis-specific behaviour against a real server: key layout, TTL, stale index entries, outages.

These tests fail (never skip) when Redis does not answer on 127.0.0.1:6379.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from proxy.store import SessionKey, StoreError, open_store
from proxy.store.redis import RedisStore
from proxy.store.redis_layout import key_part
from tests.store.conftest import REDIS_URL

KEY = SessionKey("tenant-hash", "session/with:colons")


@pytest.fixture
async def redis_store(redis_prefix: str) -> AsyncIterator[RedisStore]:
    store = RedisStore(REDIS_URL, prefix=redis_prefix, ttl_seconds=100)
    yield store
    await store.close()


def session_key(prefix: str, key: SessionKey) -> str:
    return f"{prefix}session:{key_part(key.tenant)}:{key_part(key.session)}"


async def test_key_layout(
    redis_store: RedisStore, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    await redis_store.put(KEY, b"data", {"n": 1}, expected_version=None)
    name = f"{redis_prefix}session:tenant-hash:session%2Fwith%3Acolons"
    assert await redis_client.hget(name, "data") == b"data"
    assert await redis_client.hget(name, "version") == b"1"
    assert await redis_client.zscore(f"{redis_prefix}index", KEY.id) is not None
    assert await redis_client.zscore(f"{redis_prefix}tenant:tenant-hash", KEY.id) is not None
    ids = await redis_client.hget(f"{redis_prefix}ids", KEY.id)
    assert ids == b"tenant-hash:session%2Fwith%3Acolons"


async def test_long_session_ids_make_short_keys(
    redis_store: RedisStore, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    key = SessionKey("t", "x" * 10_240)
    await redis_store.put(key, b"data", {}, expected_version=None)
    names = [name async for name in redis_client.scan_iter(match=f"{redis_prefix}session:*")]
    assert len(names) == 1 and len(names[0]) < len(redis_prefix) + 80
    got = await redis_store.get(key)
    assert got is not None and got.key == key


async def test_ttl_is_set_on_put_and_refreshed_on_put_and_get(
    redis_store: RedisStore, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    name = session_key(redis_prefix, KEY)
    await redis_store.put(KEY, b"v1", {}, expected_version=None)
    assert 95 <= await redis_client.ttl(name) <= 100
    await redis_client.expire(name, 10)
    assert await redis_store.get(KEY) is not None
    assert 95 <= await redis_client.ttl(name) <= 100
    await redis_client.expire(name, 10)
    assert await redis_store.get_by_id(KEY.id) is not None
    assert 95 <= await redis_client.ttl(name) <= 100
    await redis_client.expire(name, 10)
    await redis_store.put(KEY, b"v2", {}, expected_version=1)
    assert 95 <= await redis_client.ttl(name) <= 100


async def test_no_ttl_means_no_expiry(redis_prefix: str, redis_client: aioredis.Redis) -> None:
    store = RedisStore(REDIS_URL, prefix=redis_prefix, ttl_seconds=None)
    try:
        await store.put(KEY, b"v1", {}, expected_version=None)
        assert await redis_client.ttl(session_key(redis_prefix, KEY)) == -1
        assert await store.get(KEY) is not None
        assert await redis_client.ttl(session_key(redis_prefix, KEY)) == -1
    finally:
        await store.close()


async def test_expired_sessions_leave_the_index(
    redis_prefix: str, redis_client: aioredis.Redis
) -> None:
    store = RedisStore(REDIS_URL, prefix=redis_prefix, ttl_seconds=1)
    keep = SessionKey("t", "kept")
    try:
        await store.put(KEY, b"short-lived", {}, expected_version=None)
        await store.put(keep, b"kept", {}, expected_version=None)
        await asyncio.sleep(0.6)
        assert await store.get(keep) is not None  # a read keeps it alive
        await asyncio.sleep(0.6)
        assert await store.get(KEY) is None
        assert await store.count() == 1
        rows, _ = await store.list()
        assert [row.key for row in rows] == [keep]
        assert await store.get_by_id(KEY.id) is None
        assert await redis_client.hget(f"{redis_prefix}ids", KEY.id) is None
        assert await redis_client.zscore(f"{redis_prefix}tenant:t", KEY.id) is None
        assert await store.put(KEY, b"again", {}, expected_version=None) == 1
    finally:
        await store.close()


async def test_list_drops_index_entries_of_vanished_sessions(
    redis_store: RedisStore, redis_client: aioredis.Redis, redis_prefix: str
) -> None:
    keys = [SessionKey("t", f"s{n}") for n in range(6)]
    for key in keys:
        await redis_store.put(key, b"x", {}, expected_version=None)
    # Evicted under memory pressure or deleted by hand: the hash is gone, the index is not.
    await redis_client.delete(
        session_key(redis_prefix, keys[1]), session_key(redis_prefix, keys[4])
    )
    seen: list[SessionKey] = []
    cursor = None
    while True:
        rows, cursor = await redis_store.list(limit=2, cursor=cursor)
        seen += [row.key for row in rows]
        if cursor is None:
            break
    assert sorted(seen, key=repr) == sorted([keys[n] for n in (0, 2, 3, 5)], key=repr)
    assert await redis_client.zcard(f"{redis_prefix}index") == 4
    assert await redis_client.hlen(f"{redis_prefix}ids") == 4
    assert await redis_store.count() == 4


async def test_replicas_share_compare_and_set(redis_prefix: str) -> None:
    replicas = [RedisStore(REDIS_URL, prefix=redis_prefix) for _ in range(2)]
    try:
        await replicas[0].put(KEY, b"0", {}, expected_version=None)

        async def increment(store: RedisStore) -> None:
            while True:
                current = await store.get(KEY)
                assert current is not None
                try:
                    data = str(int(current.data) + 1).encode()
                    await store.put(KEY, data, {}, expected_version=current.version)
                    return
                except StoreError:
                    continue

        await asyncio.gather(*(increment(replicas[n % 2]) for n in range(20)))
        final = await replicas[1].get(KEY)
        assert final is not None and (final.data, final.version) == (b"20", 21)
    finally:
        for store in replicas:
            await store.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_server_is_a_fast_store_error() -> None:
    store = open_store(f"redis://127.0.0.1:{_closed_port()}/0")
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as info:
            await store.get(KEY)
        assert info.value.__cause__ is not None
        with pytest.raises(StoreError):
            await store.put(KEY, b"x", {}, expected_version=None)
        with pytest.raises(StoreError):
            await store.list()
        assert await store.ping() is False
        assert time.monotonic() - started < 5
    finally:
        await store.close()


async def test_silent_server_times_out_into_store_error() -> None:
    # A server that accepts connections and never answers: a hung Redis, a black-holed route.
    accepted: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout=0.2)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError):
            await store.get(KEY)
        assert await store.ping() is False
        assert time.monotonic() - started < 5  # two 0.2 s timeouts (and retries), not a hang
    finally:
        await store.close()
        server.close()
        for writer in accepted:
            writer.close()
            await writer.wait_closed()
        await server.wait_closed()
