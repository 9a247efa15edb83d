"""Opening a store from its URL: memory://, sqlite:///path.db, redis://host:port/db.

Kept apart from `proxy.store.base` (the contract), which imports no implementation of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from proxy.store.base import DEFAULT_MAX_SESSION_BYTES, DEFAULT_TTL_SECONDS, Store


def default_store_url() -> str:
    """`sqlite:///` + sessions.db in the user's state dir ($XDG_STATE_HOME or ~/.local/state)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return f"sqlite:///{base / 'xun-proxy' / 'sessions.db'}"


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{netloc}"))


def open_store(
    url: str,
    *,
    max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
    ttl_seconds: int | None = DEFAULT_TTL_SECONDS,
) -> Store:
    """Build a store from a URL: memory://, sqlite:///path.db, redis://host:port/db.

    Nothing is connected yet: the first operation connects (and reports a failure as
    `StoreError`). A URL that names no known store raises ValueError.
    """
    url = url.strip()
    if url in ("", "sqlite://"):
        url = default_store_url()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "memory":
        if url.lower() not in ("memory://", "memory:"):
            raise ValueError(f"invalid store URL {url!r}: the memory store takes no path")
        from proxy.store.memory import MemoryStore

        return MemoryStore(max_session_bytes=max_session_bytes)
    if scheme == "sqlite":
        from proxy.store.sqlite import SQLiteStore

        path, read_only = _parse_sqlite_url(url)
        return SQLiteStore(
            path, max_session_bytes=max_session_bytes, ttl_seconds=ttl_seconds, read_only=read_only
        )
    if scheme in ("redis", "rediss"):
        return _open_redis(url, max_session_bytes=max_session_bytes, ttl_seconds=ttl_seconds)
    raise ValueError(
        f"unsupported store URL {_redact(url)!r}: expected memory://, sqlite:///relative.db, "
        "sqlite:////absolute/path.db or redis://host:port/db"
    )


def _parse_sqlite_url(url: str) -> tuple[str, bool]:
    if not url.startswith("sqlite:///"):
        raise ValueError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute/path.db"
        )
    rest = url[len("sqlite:///") :]
    path, _, query = rest.partition("?")
    if not path:
        raise ValueError(
            f"invalid SQLite URL {url!r}: no file path (use sqlite:// for the default)"
        )
    params = parse_qs(query, keep_blank_values=True)
    if set(params) - {"mode"} or params.get("mode", ["rw"]) not in (["rw"], ["ro"]):
        raise ValueError(f"invalid SQLite URL {url!r}: the only option is ?mode=ro")
    return path, params.get("mode") == ["ro"]


def _open_redis(url: str, *, max_session_bytes: int, ttl_seconds: int | None) -> Store:
    parts = urlsplit(url)
    try:
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"invalid Redis URL {_redact(url)!r}: bad port") from exc
    if not parts.hostname:
        raise ValueError(f"invalid Redis URL {_redact(url)!r}: no host")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"invalid Redis URL {_redact(url)!r}: the path must be a db number")
    params = parse_qs(parts.query, keep_blank_values=True)
    prefix = params.pop("prefix", ["xun:"])[-1]
    query = urlencode(params, doseq=True)
    try:
        from proxy.store.redis import RedisStore
    except ImportError as exc:  # the optional extra is missing
        raise ValueError("a redis:// store needs redis-py: pip install 'xun-proxy[redis]'") from exc
    return RedisStore(
        urlunsplit(parts._replace(query=query)),
        prefix=prefix,
        max_session_bytes=max_session_bytes,
        ttl_seconds=ttl_seconds,
    )
