"""The price side of compaction: what a session's prompt cache is worth, and what a
compaction costs and saves. Pure: no I/O.

Providers bill a cached prompt prefix at a fraction of the price (the cache-read factor).
An append-only session keeps almost its whole prompt cached; a compaction rewrites the
prefix from the first changed message on, and that part is billed in full once. A
compaction pays for itself when the tokens it removes, billed at the cached price on every
later turn, outweigh that one-off rewrite plus the summary call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.turn_log import TurnLog

# Cache-read price relative to uncached input, by model-name prefix (longest prefix wins).
# Public list prices at the time of writing; an operator overrides them in the config.
DEFAULT_CACHE_FACTORS: dict[str, float] = {
    "gpt-4o": 0.5,
    "gpt-4.1": 0.25,
    "gpt-5": 0.1,
    "o1": 0.5,
    "o3": 0.25,
    "o4": 0.25,
    "claude": 0.1,
    "anthropic/": 0.1,
    "deepseek": 0.1,
    "gemini": 0.25,
    "google/": 0.25,
}
FALLBACK_CACHE_FACTOR = 0.5
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_REPLY_RESERVE = 8_192


def cache_factor_for(model: str | None, overrides: Mapping[str, float] | None = None) -> float:
    """The cache-read factor of a model: configured overrides first, then the defaults."""
    name = (model or "").lower()
    for table in (overrides or {}, DEFAULT_CACHE_FACTORS):
        best = max((p for p in table if name.startswith(p.lower())), key=len, default=None)
        if best is not None:
            return float(table[best])
    return FALLBACK_CACHE_FACTOR


def observed_hit_ratio(
    turns: Sequence[Mapping[str, Any]] | TurnLog, window: int = 8
) -> float | None:
    """Share of the prompt the upstream served from its cache on recent append-only turns.

    Only turns whose predecessor did not compact count (a compaction rewrites the prefix on
    purpose). None when the upstream never reported `cached_tokens`. Given the `TurnLog`
    itself, only the records it reads are decoded (the newest, usually `window` + 1).
    """
    newest = turns.newest_first() if isinstance(turns, TurnLog) else reversed(turns)
    recent: list[float] = []
    later = next(newest, None)
    if later is None:
        return None
    for earlier in newest:  # `later` counts when `earlier`, its predecessor, did not compact
        if earlier.get("compaction", "none") == "none":
            cached, prompt = later.get("cached_tokens"), later.get("prompt_tokens")
            if isinstance(cached, int) and isinstance(prompt, int) and prompt > 0:
                recent.append(min(1.0, cached / prompt))
                if len(recent) == window:
                    break
        later = earlier
    if not recent:
        return None
    return sum(recent) / len(recent)


@dataclass
class Economics:
    """What the cost-aware compactor knows about one session."""

    cache_factor: float = FALLBACK_CACHE_FACTOR
    # Share of an append-only prompt the upstream caches: 1.0 when it caches everything it
    # can, 0.0 when it caches nothing (then a rewrite costs nothing extra).
    hit_ratio: float = 1.0
    turns: int = 0
    context_window: int | None = None
    reply_reserve: int = DEFAULT_REPLY_RESERVE
    # Size right after the last summary and what it removed (the no-loop rule).
    size_after_summary: int | None = None
    removed_by_summary: int = 0
    # Savings forgone so far by deferring: what the best compaction would have saved on each
    # turn since the session first went over the threshold. A compaction runs once this
    # reaches its cost (rent until the rent paid equals the price, then buy), so a session
    # that ends soon after crossing the threshold never pays for a compaction it could not
    # earn back. The compactor updates it; the caller stores it with the session.
    accrued: float = 0.0
    # The first compaction of a session also adds the proxy's tool to the request, which
    # changes the tools block ahead of every message: the whole prompt is re-sent uncached.
    rewrites_all: bool = False
    # Price of writing a prompt token into the cache, relative to uncached input: 1.0 where
    # caching is automatic (OpenAI), 1.25 for Anthropic's 5-minute cache writes.
    write_factor: float = 1.0

    @property
    def effective_price(self) -> float:
        """Price of a prompt token that an append-only turn would have sent cached."""
        return self.hit_ratio * self.cache_factor + (1.0 - self.hit_ratio)

    def ceiling(self) -> int:
        """The hard limit: the model's window minus room for the reply."""
        window = self.context_window or DEFAULT_CONTEXT_WINDOW
        return max(1, window - self.reply_reserve)

    def rewrite_cost(self, tokens: float) -> float:
        """Extra cost of sending `tokens` uncached once instead of at the cached price."""
        return tokens * (self.write_factor - self.effective_price)

    def saving_per_turn(self, removed: float) -> float:
        return removed * self.effective_price

    def may_summarize(self, size: int) -> bool:
        """No loops: a new summary only once the session grew by more than the last removed."""
        if self.size_after_summary is None:
            return True
        return size - self.size_after_summary > self.removed_by_summary
