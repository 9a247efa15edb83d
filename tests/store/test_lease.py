"""Session leases and `version`, part of the store contract: every backend (see conftest)."""

from __future__ import annotations

import asyncio

import pytest

from proxy.store import SessionKey, Store
from tests.store.conftest import MakeStore

KEY = SessionKey("tenant-a", "session-1")
OTHER = SessionKey("tenant-a", "session-2")


async def test_one_holder_at_a_time(store: Store) -> None:
    token = await store.acquire(KEY, 30)
    assert token
    assert await store.acquire(KEY, 30) is None
    other = await store.acquire(OTHER, 30)  # leases are per session
    assert other and other != token
    await store.release(KEY, token)
    again = await store.acquire(KEY, 30)
    assert again and again != token


async def test_release_and_renew_need_the_holders_token(store: Store) -> None:
    token = await store.acquire(KEY, 30)
    assert token
    await store.release(KEY, "not-the-token")
    assert await store.acquire(KEY, 30) is None
    assert await store.renew(KEY, "not-the-token", 30) is False
    assert await store.renew(KEY, token, 30) is True
    await store.release(KEY, token)
    assert await store.renew(KEY, token, 30) is False
    await store.release(KEY, token)  # releasing twice is harmless


async def test_a_lease_expires_by_itself(store: Store) -> None:
    token = await store.acquire(KEY, 0.05)
    assert token
    await asyncio.sleep(0.15)
    successor = await store.acquire(KEY, 30)
    assert successor
    # The expired holder can neither extend nor release its successor's lease.
    assert await store.renew(KEY, token, 30) is False
    await store.release(KEY, token)
    assert await store.acquire(KEY, 30) is None


async def test_renew_keeps_a_lease_alive(store: Store) -> None:
    token = await store.acquire(KEY, 0.3)
    assert token
    for _ in range(4):
        await asyncio.sleep(0.1)
        assert await store.renew(KEY, token, 0.3)
    assert await store.acquire(KEY, 30) is None


async def test_lease_left_runs_down_and_renews(store: Store) -> None:
    assert await store.lease_left(KEY) is None
    token = await store.acquire(KEY, 2)
    assert token
    first = await store.lease_left(KEY)
    assert first is not None and 1.5 < first <= 2
    await asyncio.sleep(0.3)
    later = await store.lease_left(KEY)
    assert later is not None and later < first - 0.2
    assert await store.renew(KEY, token, 2)
    renewed = await store.lease_left(KEY)
    assert renewed is not None and renewed > later
    await store.release(KEY, token)
    assert await store.lease_left(KEY) is None
    assert await store.acquire(KEY, 0.05)
    await asyncio.sleep(0.15)
    assert await store.lease_left(KEY) is None  # expired


async def test_racing_acquirers_get_one_lease(store: Store) -> None:
    tokens = await asyncio.gather(*(store.acquire(KEY, 30) for _ in range(20)))
    assert sum(token is not None for token in tokens) == 1


async def test_bad_ttl_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        await store.acquire(KEY, 0)


async def test_leases_do_not_touch_sessions(store: Store) -> None:
    token = await store.acquire(KEY, 30)
    assert token
    assert await store.get(KEY) is None
    assert await store.count() == 0
    rows, _ = await store.list()
    assert rows == []
    assert await store.put(KEY, b"x", {}, expected_version=None) == 1
    await store.release(KEY, token)
    stored = await store.get(KEY)
    assert stored is not None and stored.data == b"x"


async def test_version(store: Store) -> None:
    assert await store.version(KEY) is None
    await store.put(KEY, b"1", {}, expected_version=None)
    assert await store.version(KEY) == 1
    await store.put(KEY, b"2", {}, expected_version=1)
    assert await store.version(KEY) == 2
    assert await store.version(SessionKey("tenant-b", "session-1")) is None
    await store.delete(KEY)
    assert await store.version(KEY) is None


@pytest.mark.parametrize("backend", ["sqlite", "redis", "cached-redis"])  # memory is private
async def test_two_instances_share_leases(make_store: MakeStore) -> None:
    first, second = await make_store(), await make_store()
    token = await first.acquire(KEY, 30)
    assert token
    assert await second.acquire(KEY, 30) is None
    assert await second.renew(KEY, token, 30)  # the token is what counts, not the instance
    await first.release(KEY, token)
    assert await second.acquire(KEY, 30)
