"""The shared store for several replicas: Redis through redis-py's asyncio client.

Keys (prefix `xun:` by default)::

    xun:session:<tenant>:<session>  hash: data, meta, version, updated_at, tenant, session, id
    xun:index                       zset: id -> updated_at (listing, newest first)
    xun:tenant:<tenant>             zset: id -> updated_at (listing one tenant)
    xun:ids                         hash: id -> "<tenant>:<session>" key suffix
    xun:expiry                      zset: id -> TTL deadline (finds expired index entries)
    xun:lease:<tenant>:<session>    string: the lease holder's token, with a PX expiry

Tenant and session parts are percent-encoded (no ':' survives), or replaced by '#' and a hash
when long, so any session header value makes a safe, bounded key. Writes, deletes and the TTL
refresh of a read are Lua scripts, so the compare-and-set and the index stay consistent under
concurrent replicas. Redis expires a session by itself; its index entries are removed when a
listing or count finds them stale. A lease is `SET NX PX`; renewing and releasing compare the
token first, in a Lua script, so a holder whose lease expired cannot touch its successor's.
Every Redis failure surfaces as `StoreError`.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlsplit

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

# KEYS: session, index, tenant index, ids, expiry.
# ARGV: expected version ('' = must not exist), data, meta, updated_at, id, tenant, session,
#       key suffix, ttl (0 = none), deadline.
# Returns the new version, or minus the found version (0 when absent) on a conflict.
_PUT = """
local current = redis.call('HGET', KEYS[1], 'version')
if (ARGV[1] == '' and current) or (ARGV[1] ~= '' and current ~= ARGV[1]) then
  return -(tonumber(current) or 0)
end
local version = (tonumber(current) or 0) + 1
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'meta', ARGV[3], 'version', tostring(version),
  'updated_at', ARGV[4], 'id', ARGV[5], 'tenant', ARGV[6], 'session', ARGV[7])
if tonumber(ARGV[9]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[9])
  redis.call('ZADD', KEYS[5], ARGV[10], ARGV[5])
else
  redis.call('PERSIST', KEYS[1])
  redis.call('ZREM', KEYS[5], ARGV[5])
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
redis.call('HSET', KEYS[4], ARGV[5], ARGV[8])
return version
"""

# KEYS: session, expiry. ARGV: ttl (0 = none), deadline, id. A read refreshes the TTL.
_GET = """
local fields = redis.call('HMGET', KEYS[1], 'data', 'meta', 'version', 'updated_at',
  'tenant', 'session')
if not fields[3] then return false end
if tonumber(ARGV[1]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
end
return fields
"""

# KEYS: session, index, tenant index, ids, expiry. ARGV: id, 'stale' to remove only the index
# entries of a session that no longer exists. Returns 1 when the session key was deleted.
# It runs while Redis is over `maxmemory` too (its commands only free memory): room can be made.
_DELETE = """
if ARGV[2] == 'stale' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local deleted = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
return deleted
"""

# KEYS: session, expiry. ARGV: ttl (0 = none), deadline, id. The version, tenant and session
# only (a cache validating its copy); refreshes the TTL like a read.
_VERSION = """
local fields = redis.call('HMGET', KEYS[1], 'version', 'tenant', 'session')
if not fields[1] then return false end
if tonumber(ARGV[1]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
end
return fields
"""

# KEYS: lease. ARGV: token, ttl in ms. 1 when the token held the lease and it was extended.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease. ARGV: token. Deletes the lease only when the token still holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_INFO_FIELDS = ("meta", "version", "updated_at", "tenant", "session")
_SWEEP_BATCH = 500


def _key_char(char: str) -> str:
    # Printable non-ASCII text stays as it is (UTF-8 in the key, readable in redis-cli --raw);
    # ASCII punctuation, spaces and control characters are percent-encoded as before.
    if not char.isascii() and char.isprintable() and not 0xD800 <= ord(char) <= 0xDFFF:
        return char
    return quote(char, safe="", errors="surrogatepass")


def key_part(value: str) -> str:
    """A key segment for a tenant or session: readable when short, never containing ':'."""
    quoted = "".join(map(_key_char, value)) if not value.isascii() else quote(value, safe="")
    if len(quoted) <= 128:
        return quoted
    digest = hashlib.sha256(value.encode()).digest()
    return "#" + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def _suffix(key: SessionKey) -> str:
    return f"{key_part(key.tenant)}:{key_part(key.session)}"


def _text(value: object) -> str:
    """Decode a bulk reply: the client hands back bytes."""
    if isinstance(value, bytes):
        return value.decode()
    raise StoreError(f"unexpected reply from Redis: {value!r}")


def _maybe_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _scored(reply: Iterable[Any]) -> list[tuple[str, float]]:
    return [(_text(member), float(score)) for member, score in reply]


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
        self._put = self._client.register_script(_PUT)
        self._get = self._client.register_script(_GET)
        self._delete = self._client.register_script(_DELETE)
        self._version = self._client.register_script(_VERSION)
        self._renew = self._client.register_script(_RENEW)
        self._release = self._client.register_script(_RELEASE)

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
        return _maybe_text(raw)

    async def _read(self, suffix: str, session_id: str) -> StoredSession | None:
        keys = self._keys(suffix)
        ttl, deadline = self._ttl_args()
        with self._errors():
            fields = await self._get(keys=[keys[0], keys[4]], args=[ttl, deadline, session_id])
        if not fields:
            return None
        data, meta, version, updated_at, tenant, session = fields
        key = SessionKey(_text(tenant), _text(session))
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
            expired = [_text(member) for member in reply]
            if not expired:
                return
            suffixes = await self._client.hmget(f"{self.prefix}ids", expired)
        pairs = zip(expired, suffixes, strict=True)
        await self._drop_stale([(session_id, _maybe_text(raw)) for session_id, raw in pairs])

    # The Store protocol.

    async def get(self, key: SessionKey) -> StoredSession | None:
        found = await self._read(_suffix(key), key.id)
        return found if found is not None and found.key == key else None

    async def version(self, key: SessionKey) -> int | None:
        keys = self._keys(_suffix(key))
        ttl, deadline = self._ttl_args()
        with self._errors():
            fields = await self._version(keys=[keys[0], keys[4]], args=[ttl, deadline, key.id])
        if not fields:
            return None
        version, tenant, session = fields
        if SessionKey(_text(tenant), _text(session)) != key:
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
        suffix = _suffix(key)
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
                keys = self._keys(_suffix(key))
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
            suffixes = [_maybe_text(raw) for raw in reply]
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
            key = SessionKey(_text(tenant), _text(session))
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
            members = _scored(reply)
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
        return f"{self.prefix}lease:{_suffix(key)}"

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
