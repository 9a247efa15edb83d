"""The shared store for several replicas: Redis through redis-py's asyncio client.

The key layout and the Lua scripts are in `proxy.store.redis_layout`. Redis expires a session
by itself; its index entries are removed when a listing or count finds them stale. A lease is
`SET NX PX`; renewing and releasing compare the token first, in a Lua script, so a holder whose
lease expired cannot touch its successor's. Every Redis failure surfaces as `StoreError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisError

from proxy.store.base import (
    DEFAULT_MAX_SESSION_BYTES,
    DEFAULT_TTL_SECONDS,
    SessionInfo,
    SessionKey,
    SessionPage,
    StoredSession,
    StoreError,
    StoreFull,
    VersionConflict,
    WriteHealth,
    after_cursor,
    check_limit,
    check_size,
    check_ttl,
    damaged_row,
    decode_cursor,
    encode_cursor,
    encode_meta,
    new_token,
    read_meta,
)
from proxy.store.redis_layout import (
    DELETE,
    GET,
    PUT,
    RELEASE,
    RENEW,
    VERSION,
    key_part,
    key_suffix,
    maybe_text,
    scored,
    text,
)

_INFO_FIELDS = ("meta", "version", "updated_at", "tenant", "session")
_SWEEP_BATCH = 500


class RedisStore:
    """Sessions in Redis, shared by every replica pointing at the same server and prefix."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "xun:",
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        ttl_seconds: int | None = DEFAULT_TTL_SECONDS,
        timeout: float = 1.0,
        max_connections: int = 64,
    ) -> None:
        if ttl_seconds is not None and ttl_seconds < 1:
            raise ValueError(f"ttl_seconds must be at least 1 or None, got {ttl_seconds}")
        parts = urlsplit(url)
        self.where = f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}"
        self.prefix = prefix
        self.max_session_bytes = max_session_bytes
        self.ttl_seconds = ttl_seconds
        # Short timeouts and a single retry (for a pooled connection that died with a server
        # restart): an outage must turn into a fast StoreError, not a stalled request.
        self._pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )
        self._client = Redis(connection_pool=self._pool)
        self._health = WriteHealth()
        self._put = self._client.register_script(PUT)
        self._get = self._client.register_script(GET)
        self._delete = self._client.register_script(DELETE)
        self._version = self._client.register_script(VERSION)
        self._renew = self._client.register_script(RENEW)
        self._release = self._client.register_script(RELEASE)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (RedisError, OSError) as exc:
            error = StoreFull if isinstance(exc, OutOfMemoryError) else StoreError
            raise error(f"Redis store {self.where}: {exc}") from exc

    def _keys(self, suffix: str) -> list[str]:
        tenant_part = suffix.split(":", 1)[0]
        p = self.prefix
        return [
            f"{p}session:{suffix}",
            f"{p}index",
            f"{p}tenant:{tenant_part}",
            f"{p}ids",
            f"{p}expiry",
        ]

    def _ttl_args(self) -> tuple[int, str]:
        ttl = self.ttl_seconds or 0
        return ttl, repr(time.time() + ttl)

    async def _suffix_of(self, session_id: str) -> str | None:
        with self._errors():
            raw = await self._client.hget(f"{self.prefix}ids", session_id)
        return maybe_text(raw)

    async def _read(self, suffix: str, session_id: str) -> StoredSession | None:
        keys = self._keys(suffix)
        ttl, deadline = self._ttl_args()
        with self._errors():
            fields = await self._get(keys=[keys[0], keys[4]], args=[ttl, deadline, session_id])
        if not fields:
            return None
        data, meta, version, updated_at, tenant, session = fields
        key = SessionKey(text(tenant), text(session))
        decoded = read_meta(meta, session_id)
        if decoded is None:
            return damaged_row(key, bytes(data or b""), int(version), float(updated_at))
        return StoredSession(key, bytes(data), decoded, int(version), float(updated_at))

    async def _drop_stale(self, stale: Sequence[tuple[str, str | None]]) -> None:
        """Remove index entries whose session is gone (the script re-checks atomically)."""
        if not stale:
            return
        with self._errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for session_id, suffix in stale:
                    if suffix is None:  # no id mapping left, only the id is known
                        pipe.zrem(f"{self.prefix}index", session_id)
                        pipe.zrem(f"{self.prefix}expiry", session_id)
                    else:
                        keys = self._keys(suffix)
                        await self._delete(keys=keys, args=[session_id, "stale"], client=pipe)
                await pipe.execute()

    async def _sweep(self) -> None:
        """Forget the index entries of sessions whose TTL deadline has passed."""
        with self._errors():
            reply = await self._client.zrangebyscore(
                f"{self.prefix}expiry", "-inf", time.time(), start=0, num=_SWEEP_BATCH
            )
            expired = [text(member) for member in reply]
            if not expired:
                return
            suffixes = await self._client.hmget(f"{self.prefix}ids", expired)
        pairs = zip(expired, suffixes, strict=True)
        await self._drop_stale([(session_id, maybe_text(raw)) for session_id, raw in pairs])

    # The Store protocol.

    async def get(self, key: SessionKey) -> StoredSession | None:
        found = await self._read(key_suffix(key), key.id)
        return found if found is not None and found.key == key else None

    async def version(self, key: SessionKey) -> int | None:
        keys = self._keys(key_suffix(key))
        ttl, deadline = self._ttl_args()
        with self._errors():
            fields = await self._version(keys=[keys[0], keys[4]], args=[ttl, deadline, key.id])
        if not fields:
            return None
        version, tenant, session = fields
        if SessionKey(text(tenant), text(session)) != key:
            return None
        return int(version)

    async def get_by_id(self, session_id: str) -> StoredSession | None:
        if not SessionKey.is_valid_id(session_id):
            return None
        suffix = await self._suffix_of(session_id)
        if suffix is None:
            return None
        found = await self._read(suffix, session_id)
        if found is None:
            await self._drop_stale([(session_id, suffix)])
        return found

    async def put(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        *,
        expected_version: int | None,
        updated_at: float | None = None,
    ) -> int:
        try:
            version = await self._put_script(key, data, meta, expected_version, updated_at)
        except StoreError as exc:
            self._health.note(exc)
            raise
        self._health.note(None)
        return version

    async def _put_script(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        expected_version: int | None,
        updated_at: float | None,
    ) -> int:
        check_size(data, self.max_session_bytes)
        meta_json = encode_meta(meta)
        suffix = key_suffix(key)
        ttl, deadline = self._ttl_args()
        expected = "" if expected_version is None else str(expected_version)
        args: list[bytes | str | int] = [
            expected,
            data,
            meta_json,
            repr(time.time() if updated_at is None else updated_at),
            key.id,
            key.tenant,
            key.session,
        ]
        with self._errors():
            result = int(
                await self._put(keys=self._keys(suffix), args=[*args, suffix, ttl, deadline])
            )
        if result <= 0:
            found = -result or None
            raise VersionConflict(f"expected version {expected_version}, found {found}")
        return result

    async def delete(self, key: SessionKey) -> bool:
        try:
            with self._errors():
                keys = self._keys(key_suffix(key))
                deleted = bool(await self._delete(keys=keys, args=[key.id, "all"]))
        except StoreError as exc:
            self._health.note(exc)
            raise
        self._health.note(None)
        return deleted

    async def _infos(
        self, session_ids: list[str], stale: list[tuple[str, str | None]]
    ) -> list[SessionInfo]:
        if not session_ids:
            return []
        with self._errors():
            reply = await self._client.hmget(f"{self.prefix}ids", session_ids)
            suffixes = [maybe_text(raw) for raw in reply]
            async with self._client.pipeline(transaction=False) as pipe:
                for suffix in suffixes:
                    if suffix is not None:
                        session_key = f"{self.prefix}session:{suffix}"
                        pipe.hmget(session_key, list(_INFO_FIELDS))
                        pipe.hstrlen(session_key, "data")
                replies = iter(await pipe.execute())
        infos: list[SessionInfo] = []
        for session_id, suffix in zip(session_ids, suffixes, strict=True):
            if suffix is None:
                stale.append((session_id, None))
                continue
            (meta, version, updated_at, tenant, session), size = next(replies), next(replies)
            if version is None:
                stale.append((session_id, suffix))
                continue
            decoded = read_meta(meta, session_id)
            if decoded is None:
                continue  # a damaged row is left out
            key = SessionKey(text(tenant), text(session))
            infos.append(
                SessionInfo(key, session_id, decoded, int(version), float(updated_at), size)
            )
        return infos

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
        await self._sweep()
        index = (
            f"{self.prefix}index" if tenant is None else f"{self.prefix}tenant:{key_part(tenant)}"
        )
        high = "+inf" if after is None else repr(after[0])
        low = "-inf" if updated_after is None else f"({updated_after!r}"
        rows: list[SessionInfo] = []
        stale: list[tuple[str, str | None]] = []
        offset, batch = 0, limit + 1
        # Offsets stay valid because stale entries are only removed once the page is built.
        while len(rows) <= limit:
            with self._errors():
                reply = await self._client.zrevrangebyscore(
                    index, high, low, start=offset, num=batch, withscores=True
                )
            members = scored(reply)
            offset += len(members)
            candidates = [sid for sid, score in members if after_cursor(score, sid, after)]
            rows += await self._infos(candidates, stale)
            if len(members) < batch:
                break
        await self._drop_stale(stale)
        page = rows[:limit]
        more = len(rows) > limit
        return page, encode_cursor(page[-1].updated_at, page[-1].id) if more else None

    async def count(self) -> int:
        await self._sweep()
        with self._errors():
            return int(await self._client.zcard(f"{self.prefix}index"))

    def _lease_key(self, key: SessionKey) -> str:
        return f"{self.prefix}lease:{key_suffix(key)}"

    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        ttl_ms = check_ttl(ttl_s)
        token = new_token()
        with self._errors():
            taken = await self._client.set(self._lease_key(key), token, nx=True, px=ttl_ms)
        return token if taken else None

    async def renew(self, key: SessionKey, token: str, ttl_s: float) -> bool:
        ttl_ms = check_ttl(ttl_s)
        with self._errors():
            return bool(await self._renew(keys=[self._lease_key(key)], args=[token, ttl_ms]))

    async def release(self, key: SessionKey, token: str) -> None:
        with self._errors():
            await self._release(keys=[self._lease_key(key)], args=[token])

    async def lease_left(self, key: SessionKey) -> float | None:
        with self._errors():
            ms = int(await self._client.pttl(self._lease_key(key)))
        return None if ms == -2 else (float("inf") if ms < 0 else ms / 1000)

    async def ping(self) -> bool:
        try:
            return bool(await self._client.ping())
        except Exception:  # the contract: ping reports, it never raises
            return False

    async def write_failure(self) -> str | None:
        """None while writes go through, else why they fail (Redis out of memory)."""
        return await self._health.check(self._probe)

    async def _probe(self) -> None:
        """A small write: Redis refuses every write while it is over `maxmemory`."""
        with self._errors():
            await self._client.set(f"{self.prefix}probe", b"1", px=1000)

    def release_memory(self) -> None:
        return None  # the server holds the sessions; the client keeps only its connections

    async def close(self) -> None:
        with self._errors():
            await self._client.aclose()
            await self._pool.aclose()
