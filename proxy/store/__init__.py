"""Where per-session compaction state lives: memory, SQLite (the default) or Redis.

`open_store(url)` picks the backend from the URL; the contract is `proxy.store.base`.
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
    StoreFull,
    VersionConflict,
)
from proxy.store.cache import CachedStore
from proxy.store.factory import default_store_url, open_store

__all__ = [
    "CachedStore",
    "SessionInfo",
    "SessionKey",
    "SessionPage",
    "SessionTooLarge",
    "Store",
    "StoreError",
    "StoreFull",
    "StoredSession",
    "VersionConflict",
    "default_store_url",
    "open_store",
]
