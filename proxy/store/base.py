"""The session store contract: value types, errors, the `Store` protocol and `open_store`.

Errors::

    StoreError            the store is unreachable or failed; the proxy passes requests
     |                    through uncompacted when it sees one
     +-- VersionConflict  compare-and-set lost: re-read and re-apply, or give up
     +-- SessionTooLarge  the serialized state is over the store's size cap
    +-- StoreFull        the store has no room left (disk full, Redis out of memory)

A bad store URL is a configuration error and raises `ValueError` from `open_store`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from proxy.errors import DegradeError

log = logging.getLogger("proxy.store")

DEFAULT_MAX_SESSION_BYTES = 8 * 2**20
DEFAULT_TTL_SECONDS = 7 * 86400

_ID_LENGTH = 22
_ID_RE = re.compile(rf"[A-Za-z0-9_-]{{{_ID_LENGTH}}}")


class StoreError(DegradeError):
    """The store is unreachable or failed."""


class VersionConflict(StoreError):
    """The stored version is not the one the writer expected."""


class SessionTooLarge(StoreError):
    """The serialized session is larger than the store accepts."""


class StoreFull(StoreError):
    """The store has no room left: SQLite's database or disk is full, Redis is out of memory."""


@dataclass(frozen=True)
class SessionKey:
    """A session: the tenant (a hash of the client's credentials) and its session header value."""

    tenant: str
    session: str

    @cached_property
    def id(self) -> str:
        """Opaque, URL-safe and stable id used in admin URLs; stores index it."""
        digest = hashlib.sha256(f"{self.tenant}\0{self.session}".encode()).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii")[:_ID_LENGTH]

    @classmethod
    def is_valid_id(cls, value: str) -> bool:
        """Whether `value` has the shape of an id (so admin can 404 without a store call)."""
        return bool(_ID_RE.fullmatch(value))


@dataclass
class StoredSession:
    """One stored session: the serialized state (opaque to the store) and listing metadata."""

    key: SessionKey
    data: bytes
    meta: dict[str, Any]
    version: int
    updated_at: float
    # Why the row cannot be read whole (its metadata is not a JSON object), or None. A
    # damaged row's state is not used: its session starts afresh, and its next write (over
    # `version`) replaces the row. Listings skip it.
    damaged: str | None = None


@dataclass
class SessionInfo:
    """A listing row: everything but the data."""

    key: SessionKey
    id: str
    meta: dict[str, Any]
    version: int
    updated_at: float
    size: int


SessionPage = tuple[list[SessionInfo], str | None]


class Store(Protocol):
    """Where session states live. Implementations: memory, SQLite, Redis (and `CachedStore`,
    a bounded in-process cache in front of any of them)."""

    @property
    def where(self) -> str:
        """The store's URL without credentials, for logs and /readyz."""
        ...

    async def get(self, key: SessionKey) -> StoredSession | None: ...

    async def version(self, key: SessionKey) -> int | None:
        """The stored version only (None: no such session); cheap, for validating a cache."""
        ...

    async def get_by_id(self, session_id: str) -> StoredSession | None: ...

    async def put(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        *,
        expected_version: int | None,
        updated_at: float | None = None,
    ) -> int:
        """Compare-and-set; `expected_version=None` means the session must not exist yet.

        Returns the new version (1 for a new session). Raises `VersionConflict` when the
        stored version differs, `SessionTooLarge` when `data` is over the size cap.
        `updated_at` is the write's timestamp (default: now), so a cache can mirror it.
        """
        ...

    async def delete(self, key: SessionKey) -> bool: ...

    async def list(
        self,
        *,
        tenant: str | None = None,
        updated_after: float | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> SessionPage:
        """Newest first; pass the returned cursor back for the next page (None: no more)."""
        ...

    async def count(self) -> int: ...

    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        """Take the session's lease for `ttl_s` seconds: a token, or None while another holds it.

        The lease is advisory (writes stay compare-and-set); it keeps two requests or replicas
        from computing the same compaction. It expires by itself when its holder dies.
        """
        ...

    async def renew(self, key: SessionKey, token: str, ttl_s: float) -> bool:
        """Extend a held lease to `ttl_s` from now; False when `token` no longer holds it."""
        ...

    async def release(self, key: SessionKey, token: str) -> None:
        """Give the lease back; does nothing when `token` no longer holds it."""
        ...

    async def lease_left(self, key: SessionKey) -> float | None:
        """Seconds until the session's lease expires; None when nobody holds it.

        A live holder keeps renewing, so a lease seen running down was abandoned.
        """
        ...

    async def ping(self) -> bool:
        """Whether the store answers; never raises."""
        ...

    # Optional (`/readyz` asks when a store has it): `async def write_failure() -> str | None`,
    # None while writes go through, else why they fail (`WriteHealth`); never raises.

    def release_memory(self) -> None:
        """Drop what the store holds in memory only to go faster (SQLite's page caches).

        Called when the proxy has gone idle, before the allocators are trimmed
        (proxy.server.allocator); may block briefly, never raises.
        """
        ...

    async def close(self) -> None: ...


# Helpers shared by the implementations.


def encode_meta(meta: dict[str, Any]) -> str:
    """Serialize listing metadata; raises TypeError/ValueError when it is not plain JSON."""
    return json.dumps(meta, separators=(",", ":"), allow_nan=False)


def decode_meta(text: str | bytes) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise StoreError("stored session metadata is not a JSON object")
    return value


def read_meta(raw: object, session_id: str) -> dict[str, Any] | None:
    """A stored row's metadata, or None when it cannot be read (not UTF-8 JSON text, not an
    object, missing): logged at warning level with the session's id, and the caller treats
    the row as damaged (`StoredSession.damaged`, skipped in listings)."""
    try:
        if not isinstance(raw, str | bytes):
            raise TypeError(f"a {type(raw).__name__}, not text")
        return decode_meta(raw)
    except (ValueError, TypeError, StoreError) as exc:  # UnicodeDecodeError is a ValueError
        log.warning(
            "session %s: stored metadata unreadable (%s); the session starts afresh on its "
            "next request and is left out of listings",
            session_id,
            type(exc).__name__,
        )
        return None


def damaged_row(key: SessionKey, data: bytes, version: int, updated_at: float) -> StoredSession:
    """A row whose metadata cannot be read (`read_meta` said why, in the log)."""
    return StoredSession(key, data, {}, version, updated_at, damaged="metadata unreadable")


class WriteHealth:
    """Whether a store's writes go through, as its last one found (for `/readyz`).

    A store pings fine while every write fails when its disk is full. It notes each write's
    outcome here (`note`); while the last one failed, `check` tries a write of its own (the
    store's probe, as large as a session's state) each time it is asked, so that a proxy a
    balancer took out of service still learns when writes go through again.
    """

    def __init__(self) -> None:
        self.failure: str | None = None

    def note(self, exc: BaseException | None) -> None:
        """A write went through (None) or failed with `exc`; a lost compare-and-set or a
        state over the size cap says nothing of the store."""
        if exc is None:
            self.failure = None
        elif isinstance(exc, StoreError) and not isinstance(exc, VersionConflict | SessionTooLarge):
            self.failure = str(exc) or type(exc).__name__

    async def check(self, probe: Callable[[], Awaitable[object]]) -> str | None:
        """None when writes go through, else why the last one (or the probe) failed."""
        if self.failure is None:
            return None
        try:
            await probe()
        except StoreError as exc:
            self.note(exc)
            return self.failure
        self.failure = None
        return None


def check_size(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise SessionTooLarge(f"session state is {len(data)} bytes; the cap is {max_bytes}")


def check_ttl(ttl_s: float) -> int:
    """A lease TTL in whole milliseconds (at least 1)."""
    if not ttl_s > 0:
        raise ValueError(f"a lease TTL must be positive, got {ttl_s}")
    return max(1, int(ttl_s * 1000))


def new_token() -> str:
    return secrets.token_hex(16)


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")


def encode_cursor(updated_at: float, session_id: str) -> str:
    """A keyset cursor: the sort key (updated_at, id) of the last row of a page."""
    raw = f"{updated_at!r}/{session_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Inverse of `encode_cursor`; a malformed cursor raises ValueError."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        stamp, session_id = raw.split("/", 1)
        return float(stamp), session_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"invalid cursor {cursor!r}") from exc


def after_cursor(updated_at: float, session_id: str, cursor: tuple[float, str] | None) -> bool:
    """Whether a row sorts after the cursor in newest-first (updated_at, id) order."""
    if cursor is None:
        return True
    return (updated_at, session_id) < cursor
