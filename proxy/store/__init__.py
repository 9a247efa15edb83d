"""Where per-session compaction state lives: memory, SQLite (the default) or Redis.

`open_store(url)` picks the backend from the URL; everything else is in `proxy.store.base`.
The backends import lazily, so `redis` is only needed for a redis:// URL. `CachedStore` puts a
bounded in-process cache in front of any of them.
"""

from proxy.store.base import (
    SessionInfo,
    SessionKey,
    SessionPage,
    SessionTooLarge,
    Store,
    StoredSession,
    StoreError,
    VersionConflict,
    default_store_url,
    open_store,
)
from proxy.store.cache import CachedStore

__all__ = [
    "CachedStore",
    "SessionInfo",
    "SessionKey",
    "SessionPage",
    "SessionTooLarge",
    "Store",
    "StoreError",
    "StoredSession",
    "VersionConflict",
    "default_store_url",
    "open_store",
]
