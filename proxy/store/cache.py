"""A bounded in-process cache of hot session states, in front of any store.

A cached entry is a hint, never the truth: `get` asks the store for the session's version
(a few bytes, `Store.version`) and only serves the cached copy when it is still current, so a
replica never decides from a state another replica has since replaced. A store that can tell
whether anybody else wrote at all since (SQLite's `data_version`: `outside_writes`) spares
that read while nobody did. Writes go through to
the store; compare-and-set there still catches a race between that check and the write, and a
`VersionConflict` (or a write whose outcome is unknown) drops the entry. The cache is bounded
by entries and by bytes, least recently used out first, so the process's memory does not grow
with the number of sessions in the store.

Beside the bytes, the cache can hold the decoded state a save of this process has just
written (`keep_decoded`), for the session's next request to take instead of decoding the
bytes again (`take_decoded`): handed out once, only while it is still the stored version,
and only the most recent `DECODED_KEPT` of them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.store.base import (
    SessionKey,
    SessionPage,
    SessionTooLarge,
    Store,
    StoredSession,
    StoreError,
    decode_meta,
    encode_meta,
)

DEFAULT_CACHE_ENTRIES = 1024
DEFAULT_CACHE_BYTES = 64 * 2**20
# What one entry costs beyond its data and metadata: the entry object, the dict slot, the
# key strings' headers. An estimate; it keeps a cache of tiny states honest about its size.
ENTRY_OVERHEAD = 512
DECODED_KEPT = 64  # decoded states held for their session's next request


def _fit(data: bytes) -> bytes:
    """A copy of `data` in an allocation of its own size. orjson (3.12 and later) hands out
    bytes whose buffer keeps all it reserved, 4 KiB at least and often 10 times the length,
    so a kept state would otherwise cost several times what the cache counts for it."""
    return bytes(memoryview(data))


@dataclass(frozen=True)
class _Entry:
    key: SessionKey
    data: bytes
    meta: str  # JSON: every hit hands out a fresh dict
    version: int
    updated_at: float
    size: int
    # The store's `outside_writes` when this entry was known to be stored: while it reads
    # the same, nobody else has written since. None: ask the store for the version.
    outside: int | None = None


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    max_entries: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def with_cache(store: Store, url: str, *, max_entries: int, max_bytes: int) -> Store:
    """The store opened from `url` behind a `CachedStore`; a memory:// store (in-process
    already) or a cache of zero entries or bytes leaves it as it is."""
    if url.strip().lower().startswith("memory:") or max_entries == 0 or max_bytes == 0:
        return store
    return CachedStore(store, max_entries=max_entries, max_bytes=max_bytes)


class CachedStore:
    """The `Store` protocol around another store, with an LRU of recently used sessions."""

    def __init__(
        self,
        inner: Store,
        *,
        max_entries: int = DEFAULT_CACHE_ENTRIES,
        max_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError("cache bounds must not be negative")
        self.inner = inner
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._decoded: OrderedDict[str, tuple[int, object]] = OrderedDict()
        none: Callable[[], int | None] = lambda: None  # noqa: E731
        self._outside_writes: Callable[[], int | None] = getattr(inner, "outside_writes", none)
        self._outside_seen: Callable[[], int | None] = getattr(inner, "outside_seen", none)

    @property
    def where(self) -> str:
        return self.inner.where

    def stats(self) -> CacheStats:
        return CacheStats(
            entries=len(self._entries),
            bytes=self._bytes,
            max_entries=self.max_entries,
            max_bytes=self.max_bytes,
            hits=self._hits,
            misses=self._misses,
            evictions=self._evictions,
        )

    # Bookkeeping. No awaits in here: each call is atomic on the event loop.

    def _drop(self, session_id: str) -> None:
        self._decoded.pop(session_id, None)
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self._bytes -= entry.size

    def _remember(
        self,
        key: SessionKey,
        data: bytes,
        meta: str,
        version: int,
        updated_at: float,
        outside: int | None,
    ) -> None:
        self._drop(key.id)
        size = len(data) + len(meta) + len(key.tenant) + len(key.session) + ENTRY_OVERHEAD
        if size > self.max_bytes or self.max_entries == 0:
            return
        self._entries[key.id] = _Entry(key, data, meta, version, updated_at, size, outside)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            evicted_id, evicted = self._entries.popitem(last=False)
            self._decoded.pop(evicted_id, None)
            self._bytes -= evicted.size
            self._evictions += 1

    def keep_decoded(self, key: SessionKey, version: int, decoded: object) -> None:
        """Hold `decoded`, what the bytes cached for this version decode to, for the
        session's next `take_decoded`. The caller gives it up: nobody else may change it."""
        entry = self._fresh(key.id, key)
        if entry is None or entry.version != version:
            return
        self._decoded[key.id] = (version, decoded)
        self._decoded.move_to_end(key.id)
        while len(self._decoded) > DECODED_KEPT:
            self._decoded.popitem(last=False)

    def take_decoded(self, key: SessionKey, version: int) -> object | None:
        """The decoded state held for this version of the session, handed out once."""
        held = self._decoded.pop(key.id, None)
        entry = self._fresh(key.id, key)
        if held is None or entry is None or held[0] != version or entry.version != version:
            return None
        return held[1]

    def _fresh(self, session_id: str, key: SessionKey) -> _Entry | None:
        entry = self._entries.get(session_id)
        return entry if entry is not None and entry.key == key else None

    # The Store protocol.

    async def get(self, key: SessionKey) -> StoredSession | None:
        entry = self._fresh(key.id, key)
        # Taken before the store is asked anything: a write after it shows as a change.
        outside = self._outside_writes() if entry is not None else self._outside_seen()
        if entry is not None:
            if outside is not None and outside == entry.outside:
                current: int | None = entry.version  # nobody else wrote since it was stored
            else:
                try:
                    current = await self.inner.version(key)
                except StoreError:
                    self._drop(key.id)
                    raise
            if current == entry.version and self._fresh(key.id, key) is entry:
                if entry.outside != outside:
                    entry = self._entries[key.id] = replace(entry, outside=outside)
                self._entries.move_to_end(key.id)
                self._hits += 1
                return StoredSession(
                    key, entry.data, decode_meta(entry.meta), entry.version, entry.updated_at
                )
            self._drop(key.id)
            if current is None:
                self._misses += 1
                return None
        self._misses += 1
        found = await self.inner.get(key)
        if found is None or found.damaged:
            self._drop(key.id)  # a damaged row is read from the store until it is rewritten
        else:
            meta = encode_meta(found.meta)
            self._remember(found.key, found.data, meta, found.version, found.updated_at, outside)
        return found

    async def version(self, key: SessionKey) -> int | None:
        return await self.inner.version(key)

    async def get_by_id(self, session_id: str) -> StoredSession | None:
        return await self.inner.get_by_id(session_id)

    async def put(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        *,
        expected_version: int | None,
        updated_at: float | None = None,
    ) -> int:
        stamp = time.time() if updated_at is None else updated_at
        meta_json = encode_meta(meta)
        outside = self._outside_seen()  # as last seen: a write by others after it shows later
        try:
            version = await self.inner.put(
                key, data, meta, expected_version=expected_version, updated_at=stamp
            )
        except SessionTooLarge:
            raise  # nothing was written: the cached copy is still the stored one
        except StoreError:
            self._drop(key.id)  # a conflict, or a write whose outcome is unknown
            raise
        self._remember(key, _fit(data), meta_json, version, stamp, outside)
        return version

    async def delete(self, key: SessionKey) -> bool:
        self._drop(key.id)
        return await self.inner.delete(key)

    async def list(
        self,
        *,
        tenant: str | None = None,
        updated_after: float | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> SessionPage:
        return await self.inner.list(
            tenant=tenant, updated_after=updated_after, limit=limit, cursor=cursor
        )

    async def count(self) -> int:
        return await self.inner.count()

    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        return await self.inner.acquire(key, ttl_s)

    async def renew(self, key: SessionKey, token: str, ttl_s: float) -> bool:
        return await self.inner.renew(key, token, ttl_s)

    async def release(self, key: SessionKey, token: str) -> None:
        await self.inner.release(key, token)

    async def lease_left(self, key: SessionKey) -> float | None:
        return await self.inner.lease_left(key)

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def write_failure(self) -> str | None:
        check = getattr(self.inner, "write_failure", None)
        failure: str | None = await check() if check is not None else None
        return failure

    def release_memory(self) -> None:
        # The hot states stay: they are bounded (max_entries, max_bytes) and the next turn of
        # each session needs its own. The decoded ones go: they only save some decoding.
        self._decoded.clear()
        self.inner.release_memory()

    async def close(self) -> None:
        self._entries.clear()
        self._decoded.clear()
        self._bytes = 0
        await self.inner.close()
