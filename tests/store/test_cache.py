"""The bounded session cache: LRU by entries and bytes, and never stale across replicas."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.store import SessionKey, SessionTooLarge, Store, StoreError, VersionConflict, open_store
from proxy.store.cache import ENTRY_OVERHEAD, CachedStore
from tests.store.conftest import MakeStore


def key(n: int) -> SessionKey:
    return SessionKey("t", f"s{n}")


def entry_size(k: SessionKey, data: bytes, meta: str = "{}") -> int:
    return len(data) + len(meta) + len(k.tenant) + len(k.session) + ENTRY_OVERHEAD


@pytest.fixture
async def inner(tmp_path: Path) -> AsyncIterator[Store]:
    store = open_store(f"sqlite:///{tmp_path / 'cache.db'}")
    yield store
    await store.close()


class CountingStore:
    """Counts full reads of the wrapped store, to see which `get`s the cache answered."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.gets = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def get(self, k: SessionKey) -> object:
        self.gets += 1
        return await self.inner.get(k)


async def test_hits_skip_the_full_read(inner: Store) -> None:
    counting = CountingStore(inner)
    cache = CachedStore(counting, max_entries=10, max_bytes=10**6)  # type: ignore[arg-type]
    await cache.put(key(1), b"state", {"n": 1}, expected_version=None)
    for _ in range(3):
        got = await cache.get(key(1))
        assert got is not None and (got.data, got.meta, got.version) == (b"state", {"n": 1}, 1)
        got.meta["n"] = 99  # a caller's copy, not the cache's
    assert counting.gets == 0
    stats = cache.stats()
    assert (stats.hits, stats.entries) == (3, 1)
    assert await cache.get(key(2)) is None
    assert counting.gets == 1


async def test_bounded_by_entries(inner: Store) -> None:
    cache = CachedStore(inner, max_entries=3, max_bytes=10**6)
    for n in range(10):
        await cache.put(key(n), b"x" * 10, {}, expected_version=None)
        assert cache.stats().entries <= 3
    await cache.get(key(7))  # 7 becomes the most recent; 8 is now the oldest
    await cache.put(key(10), b"y", {}, expected_version=None)
    assert sorted(cache._entries) == sorted(k.id for k in (key(7), key(9), key(10)))
    assert cache.stats().evictions == 8
    for n in range(11):  # evicted sessions are read back from the store
        got = await cache.get(key(n))
        assert got is not None and got.version == 1


async def test_bounded_by_bytes(inner: Store) -> None:
    one = entry_size(key(0), b"x" * 1000)
    cache = CachedStore(inner, max_entries=1000, max_bytes=3 * one + 10)
    for n in range(10):
        await cache.put(key(n), b"x" * 1000, {}, expected_version=None)
        assert cache.stats().bytes <= cache.max_bytes
    assert cache.stats().entries == 3
    assert cache.stats().bytes == 3 * one
    # An entry bigger than the whole cache is never held, and pushes nothing out.
    await cache.put(key(99), b"z" * (4 * one), {}, expected_version=None)
    assert cache.stats().entries == 3
    got = await cache.get(key(99))
    assert got is not None and len(got.data) == 4 * one
    assert cache.stats().entries == 3


async def test_zero_bounds_cache_nothing(inner: Store) -> None:
    cache = CachedStore(inner, max_entries=0, max_bytes=10**6)
    await cache.put(key(1), b"x", {}, expected_version=None)
    assert cache.stats().entries == 0
    got = await cache.get(key(1))
    assert got is not None and got.data == b"x"


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_a_replica_never_serves_a_stale_state(make_store: MakeStore) -> None:
    # Two replicas, each with its own cache, on one shared store.
    a = CachedStore(await make_store(), max_entries=10, max_bytes=10**6)
    b = CachedStore(await make_store(), max_entries=10, max_bytes=10**6)
    k = key(1)
    await a.put(k, b"v1", {}, expected_version=None)
    got = await b.get(k)
    assert got is not None and got.data == b"v1"
    await b.put(k, b"v2", {}, expected_version=1)
    got = await a.get(k)  # a's cached v1 is checked against the store and replaced
    assert got is not None and (got.data, got.version) == (b"v2", 2)
    await b.put(k, b"v3", {}, expected_version=2)
    with pytest.raises(VersionConflict):
        await a.put(k, b"stale", {}, expected_version=2)
    assert k.id not in a._entries  # the conflict dropped a's copy
    got = await a.get(k)
    assert got is not None and got.data == b"v3"
    await b.delete(k)
    assert await a.get(k) is None
    assert a.stats().entries == 0


async def test_too_large_keeps_the_cached_copy() -> None:
    small = open_store("memory://", max_session_bytes=100)
    cache = CachedStore(small, max_entries=10, max_bytes=10**6)
    await cache.put(key(1), b"ok", {}, expected_version=None)
    with pytest.raises(SessionTooLarge):
        await cache.put(key(1), b"x" * 101, {}, expected_version=1)
    assert cache.stats().entries == 1
    got = await cache.get(key(1))
    assert got is not None and got.data == b"ok"


async def test_a_failing_store_drops_the_entry(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'gone.db'}")
    cache = CachedStore(store, max_entries=10, max_bytes=10**6)
    await cache.put(key(1), b"ok", {}, expected_version=None)
    await store.close()  # every call now fails with StoreError
    with pytest.raises(StoreError):
        await cache.get(key(1))  # a cached copy is no answer while the store is away
    assert cache.stats().entries == 0
    with pytest.raises(StoreError):
        await cache.put(key(1), b"again", {}, expected_version=1)


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        CachedStore(open_store("memory://"), max_entries=-1)


class VersionCounting(CountingStore):
    """Counts version reads too: the ones SQLite's data_version lets the cache skip."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.versions = 0

    async def version(self, k: SessionKey) -> int | None:
        self.versions += 1
        return await self.inner.version(k)


async def test_sqlite_skips_the_version_read_while_nobody_else_writes(tmp_path: Path) -> None:
    path = f"sqlite:///{tmp_path / 'shared.db'}"
    mine, theirs = open_store(path), open_store(path)  # two processes' stores, one file
    try:
        await mine.put(key(0), b"schema", {}, expected_version=None)  # the worker opens the file
        counting = VersionCounting(mine)
        cache = CachedStore(counting, max_entries=10, max_bytes=10**6)  # type: ignore[arg-type]
        version = await cache.put(key(1), b"one", {}, expected_version=None)
        for turn in range(3):  # the turns of one process: each read is its own last write
            got = await cache.get(key(1))
            assert got is not None and got.version == version
            version = await cache.put(key(1), b"t%d" % turn, {}, expected_version=version)
        assert counting.versions <= 1  # at most the first look, before data_version is known

        await theirs.put(key(1), b"theirs", {}, expected_version=version)  # another process
        got = await cache.get(key(1))
        assert got is not None and (got.data, got.version) == (b"theirs", version + 1)
        assert counting.versions >= 1 and counting.gets == 1

        # A write of theirs to another session still makes the next read ask once.
        asked = counting.versions
        await theirs.put(key(2), b"other", {}, expected_version=None)
        got = await cache.get(key(1))
        assert got is not None and got.data == b"theirs"
        assert counting.versions == asked + 1
        assert (await cache.get(key(1))) is not None and counting.versions == asked + 1
    finally:
        await mine.close()
        await theirs.close()
