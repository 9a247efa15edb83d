"""An in-process store for tests and throwaway runs: a dict, gone when the process exits.

Every operation completes without awaiting, so it is atomic with respect to other tasks;
a lock makes it safe across threads too (an app served in a thread, a test in another).
Leases are a dict of (token, deadline) on the monotonic clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from time import monotonic
from typing import Any

from proxy.store.base import (
    DEFAULT_MAX_SESSION_BYTES,
    SessionInfo,
    SessionKey,
    SessionPage,
    StoredSession,
    VersionConflict,
    after_cursor,
    check_limit,
    check_size,
    check_ttl,
    decode_cursor,
    decode_meta,
    encode_cursor,
    encode_meta,
    new_token,
)


@dataclass(frozen=True)
class _Entry:
    key: SessionKey
    data: bytes
    meta: str  # JSON, so callers never share a mutable dict with the store
    version: int
    updated_at: float


class MemoryStore:
    """Sessions in a dict keyed by id. The TTL does not apply: the process is the lifetime."""

    where = "memory://"

    def __init__(self, *, max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES) -> None:
        self.max_session_bytes = max_session_bytes
        self._entries: dict[str, _Entry] = {}
        self._leases: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    async def get(self, key: SessionKey) -> StoredSession | None:
        entry = self._entries.get(key.id)
        if entry is None or entry.key != key:
            return None
        return _stored(entry)

    async def get_by_id(self, session_id: str) -> StoredSession | None:
        entry = self._entries.get(session_id)
        return None if entry is None else _stored(entry)

    async def version(self, key: SessionKey) -> int | None:
        entry = self._entries.get(key.id)
        return None if entry is None or entry.key != key else entry.version

    async def put(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        *,
        expected_version: int | None,
        updated_at: float | None = None,
    ) -> int:
        check_size(data, self.max_session_bytes)
        meta_json = encode_meta(meta)
        stamp = time.time() if updated_at is None else updated_at
        with self._lock:
            current = self._entries.get(key.id)
            found = None if current is None else current.version
            if found != expected_version:
                raise VersionConflict(f"expected version {expected_version}, found {found}")
            version = 1 if found is None else found + 1
            self._entries[key.id] = _Entry(key, bytes(data), meta_json, version, stamp)
        return version

    async def delete(self, key: SessionKey) -> bool:
        with self._lock:
            return self._entries.pop(key.id, None) is not None

    async def list(
        self,
        *,
        tenant: str | None = None,
        updated_after: float | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> SessionPage:
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        with self._lock:
            entries = [
                entry
                for entry in self._entries.values()
                if (tenant is None or entry.key.tenant == tenant)
                and (updated_after is None or entry.updated_at > updated_after)
                and after_cursor(entry.updated_at, entry.key.id, after)
            ]
        entries.sort(key=lambda e: (e.updated_at, e.key.id), reverse=True)
        page = entries[:limit]
        rows = [
            SessionInfo(e.key, e.key.id, decode_meta(e.meta), e.version, e.updated_at, len(e.data))
            for e in page
        ]
        more = len(entries) > limit
        next_cursor = encode_cursor(page[-1].updated_at, page[-1].key.id) if more else None
        return rows, next_cursor

    async def count(self) -> int:
        return len(self._entries)

    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        ttl_ms = check_ttl(ttl_s)
        now = monotonic()
        with self._lock:
            held = self._leases.get(key.id)
            if held is not None and held[1] > now:
                return None
            token = new_token()
            self._leases[key.id] = (token, now + ttl_ms / 1000)
            return token

    async def renew(self, key: SessionKey, token: str, ttl_s: float) -> bool:
        ttl_ms = check_ttl(ttl_s)
        now = monotonic()
        with self._lock:
            held = self._leases.get(key.id)
            if held is None or held[0] != token or held[1] <= now:
                return False
            self._leases[key.id] = (token, now + ttl_ms / 1000)
            return True

    async def release(self, key: SessionKey, token: str) -> None:
        with self._lock:
            held = self._leases.get(key.id)
            if held is not None and held[0] == token:
                del self._leases[key.id]

    async def lease_left(self, key: SessionKey) -> float | None:
        held = self._leases.get(key.id)
        left = None if held is None else held[1] - monotonic()
        return left if left is not None and left > 0 else None

    async def ping(self) -> bool:
        return True

    def release_memory(self) -> None:
        return None  # it holds the sessions themselves, nothing besides

    async def close(self) -> None:
        return None


def _stored(entry: _Entry) -> StoredSession:
    return StoredSession(
        entry.key, entry.data, decode_meta(entry.meta), entry.version, entry.updated_at
    )
