"""5. Compaction decisions beyond the seed (pure): the cache-aware strategy, economics, windows,
escalation, the summariser."""
