"""How long a provider keeps a session's prompt cache, and whether it has gone cold.

Provider prompt caches expire after a time without use: Anthropic's after 5 minutes, or an
hour when the request's `cache_control` asks `"ttl": "1h"`; OpenAI's in-memory cache after 5
to 10 minutes of inactivity, or 24 hours when the request asks `prompt_cache_retention:
"24h"`. After a longer pause the next request pays its whole prompt uncached (and writes it
into the cache again) whatever the proxy does, so a compaction at that request rewrites
nothing that was still cached: the cost-aware strategy then prices the rewrite as free
(`Economics.cache_cold`).

Pure: the time since the session's last request is an input (the clock is read in `turn/`).
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.session.turn_log import TurnLog, decode

# What the client asked for (`Wire.cache_ttl`), in seconds: it wins over every default.
REQUESTED_LIFETIMES: dict[str, float] = {"1h": 3600.0, "24h": 86400.0}
# The providers' default lifetimes by model-name prefix (longest wins); an operator overrides
# them with `auto_compact.cache_lifetimes`.
DEFAULT_LIFETIMES: dict[str, float] = {"claude": 300.0, "anthropic": 300.0}
# OpenAI keeps an unused prefix 5 to 10 minutes (up to an hour off-peak); the longer bound,
# so a warm cache is never taken for a cold one (that would cost a real rewrite).
FALLBACK_LIFETIME = 600.0


def lifetime_for(
    model: str | None, ttl: str | None = None, overrides: Mapping[str, float] | None = None
) -> float:
    """Seconds the upstream keeps this request's prompt cache: the lifetime the request asks
    for ("1h", "24h"), else the configured one for the model (by prefix, longest wins), else
    the provider's default."""
    if ttl in REQUESTED_LIFETIMES:
        return REQUESTED_LIFETIMES[ttl]
    name = (model or "").lower()
    for table in (overrides or {}, DEFAULT_LIFETIMES):
        best = max((p for p in table if name.startswith(p.lower())), key=len, default=None)
        if best is not None:
            return float(table[best])
    return FALLBACK_LIFETIME


def last_request_at(turns: TurnLog) -> float | None:
    """When the session's last recorded turn was answered (its record's `at`), if known."""
    for line in turns.newest_first():
        record = decode(line)
        at = None if record is None else record.get("at")
        if isinstance(at, int | float) and not isinstance(at, bool):
            return float(at)
    return None


def is_cold(idle_seconds: float | None, lifetime: float) -> bool:
    """Whether a cache unused for `idle_seconds` has expired (None: no earlier request)."""
    return idle_seconds is not None and idle_seconds > lifetime


def cache_cold(
    turns: TurnLog,
    now: float,
    model: str | None,
    ttl: str | None = None,
    overrides: Mapping[str, float] | None = None,
) -> bool:
    """Whether the session's prompt cache has expired since its last request."""
    last = last_request_at(turns)
    idle = None if last is None else now - last
    return is_cold(idle, lifetime_for(model, ttl, overrides))
