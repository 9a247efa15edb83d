"""The cache-aware strategy's old import path, an alias kept for one release.

Users' configs name `proxy.cache_compact:CacheAwareCompactor`; the strategy now lives in
`proxy.compaction.cache_aware`. Deprecated: name the new path (or `cache-aware`) instead.
"""

from proxy.compaction.cache_aware import CacheAwareCompactor, Plan

__all__ = ["CacheAwareCompactor", "Plan"]
