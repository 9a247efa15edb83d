"""The Redis store's key layout and the Lua scripts that keep it consistent.

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
concurrent replicas; renewing and releasing a lease compare its token first, in a Lua script.
Replies come back as bytes and are decoded here too.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from proxy.store.base import SessionKey, StoreError

# KEYS: session, index, tenant index, ids, expiry.
# ARGV: expected version ('' = must not exist), data, meta, updated_at, id, tenant, session,
#       key suffix, ttl (0 = none), deadline.
# Returns the new version, or minus the found version (0 when absent) on a conflict.
PUT = """
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
GET = """
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
DELETE = """
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
VERSION = """
local fields = redis.call('HMGET', KEYS[1], 'version', 'tenant', 'session')
if not fields[1] then return false end
if tonumber(ARGV[1]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
end
return fields
"""

# KEYS: lease. ARGV: token, ttl in ms. 1 when the token held the lease and it was extended.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease. ARGV: token. Deletes the lease only when the token still holds it.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


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


def key_suffix(key: SessionKey) -> str:
    return f"{key_part(key.tenant)}:{key_part(key.session)}"


def text(value: object) -> str:
    """Decode a bulk reply: the client hands back bytes."""
    if isinstance(value, bytes):
        return value.decode()
    raise StoreError(f"unexpected reply from Redis: {value!r}")


def maybe_text(value: object) -> str | None:
    return None if value is None else text(value)


def scored(reply: Iterable[Any]) -> list[tuple[str, float]]:
    return [(text(member), float(score)) for member, score in reply]
