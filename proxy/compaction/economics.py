"""The price side of compaction: what a session's prompt cache is worth, and what a
compaction costs and saves. Pure: no I/O.

Providers bill a cached prompt prefix at a fraction of the price (the cache-read factor),
and some bill writing a prompt into the cache above it (the cache-write factor: Anthropic
1.25x for its 5-minute cache, 2x for the 1-hour one; OpenAI 1.25x from GPT-5.6 on). An
append-only session keeps almost its whole prompt cached; a compaction rewrites the prefix
from the first changed message on, and that part is billed once at the write price. A
compaction pays for itself when the tokens it removes, billed at the cached price on every
later turn, outweigh that one-off rewrite plus the summary call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.session.turn_log import TurnLog, decode

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
# Cache-write price relative to uncached input, by the cache's lifetime (`ttl` in the
# client's `cache_control`; 5 minutes when it names none). Anthropic's models (and names that
# route to them) bill both; OpenAI bills writes from GPT-5.6 on; other models 1.0 (free).
ANTHROPIC_WRITE_FACTORS: dict[str, float] = {"5m": 1.25, "1h": 2.0}
OPENAI_WRITE_FACTOR = 1.25
OPENAI_WRITES_FROM = (5, 6)
_GPT_VERSION = re.compile(r"(?:^|/)gpt-(\d+)(?:\.(\d+))?")
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_REPLY_RESERVE = 8_192


def cache_factor_for(model: str | None, overrides: Mapping[str, float] | None = None) -> float:
    """The cache-read factor of a model: configured overrides first, then the defaults."""
    name = (model or "").lower()
    for table in (overrides or {}, DEFAULT_CACHE_FACTORS):
        best = _longest_prefix(name, table)
        if best is not None:
            return float(table[best])
    return FALLBACK_CACHE_FACTOR


def _longest_prefix(name: str, table: Mapping[str, Any]) -> str | None:
    return max((p for p in table if name.startswith(p.lower())), key=len, default=None)


def write_factor_for(
    model: str | None,
    ttl: str | None = None,
    overrides: Mapping[str, float | Mapping[str, float]] | None = None,
) -> float:
    """The cache-write factor of a model for a cache lifetime ("5m" or "1h", None: "5m").

    A configured override (by model-name prefix, longest wins) is a factor for every lifetime
    or a table by lifetime; a lifetime it does not name falls back to the defaults.
    """
    name = (model or "").lower()
    life = "1h" if ttl == "1h" else "5m"
    best = _longest_prefix(name, overrides or {})
    if best is not None and overrides is not None:
        value = overrides[best]
        if not isinstance(value, Mapping):
            return float(value)
        if life in value:
            return float(value[life])
    if "claude" in name or name.startswith("anthropic"):
        return ANTHROPIC_WRITE_FACTORS[life]
    version = _GPT_VERSION.search(name)
    if version and (int(version[1]), int(version[2] or 0)) >= OPENAI_WRITES_FROM:
        return OPENAI_WRITE_FACTOR
    return 1.0


def observed_write_share(
    turns: Sequence[Mapping[str, Any]] | TurnLog, window: int = 8
) -> float | None:
    """Share of the uncached prompt the upstream wrote into its cache on recent turns.

    Read from `cache_write_tokens` (`cache_write_tokens` of OpenAI's usage details,
    Anthropic's `cache_creation_input_tokens`); None when the upstream never reported it.
    Anthropic writes only up to the client's last cache breakpoint, none without one.
    """
    records: Iterable[Mapping[str, Any] | None]  # newest first, decoded as they are read
    if isinstance(turns, TurnLog):
        records = (decode(line) for line in turns.newest_first() if _may_count_writes(line))
    else:
        records = reversed(turns)
    recent: list[float] = []
    for record in records:
        share = None if record is None else _written_share(record)
        if share is not None:
            recent.append(share)
            if len(recent) == window:
                break
    return sum(recent) / len(recent) if recent else None


def write_terms(
    model: str | None,
    ttl: str | None,
    turns: Sequence[Mapping[str, Any]] | TurnLog,
    overrides: Mapping[str, float | Mapping[str, float]] | None = None,
) -> tuple[float, float]:
    """(the write factor, the share written) for `Economics`: the share as observed, 1.0
    (every uncached token written) when the upstream never reported its writes."""
    share = observed_write_share(turns)
    return write_factor_for(model, ttl, overrides), 1.0 if share is None else share


def _may_count_writes(line: str) -> bool:
    """Whether a stored line may hold a `cache_write_tokens` count (else it is not decoded)."""
    if "\\" in line:
        return True  # an escape could spell the key another way
    n = line.count("cache_write_tokens")
    return n > 1 or (n == 1 and '"cache_write_tokens":null' not in line)


def _written_share(turn: Mapping[str, Any]) -> float | None:
    written, prompt = turn.get("cache_write_tokens"), turn.get("prompt_tokens")
    cached = turn.get("cached_tokens")
    if type(written) is not int or type(prompt) is not int or written < 0:
        return None  # not counts (a damaged record): ignored
    uncached = prompt - (cached if type(cached) is int else 0)
    return min(1.0, written / uncached) if uncached > 0 else None


def observed_hit_ratio(
    turns: Sequence[Mapping[str, Any]] | TurnLog, window: int = 8
) -> float | None:
    """Share of the prompt the upstream served from its cache on recent append-only turns.

    Only turns whose predecessor did not compact count (a compaction rewrites the prefix on
    purpose). None when the upstream never reported `cached_tokens`. Given the `TurnLog`
    itself, it decodes only the records that can count and their predecessors.
    """
    if isinstance(turns, TurnLog):
        return _log_hit_ratio(turns.lines(), window)
    recent: list[float] = []  # newest first; the log is read from its end
    for i in range(len(turns) - 1, 0, -1):
        if turns[i - 1].get("compaction", "none") != "none":
            continue
        ratio = _cached_share(turns[i])
        if ratio is not None:
            recent.append(ratio)
            if len(recent) == window:
                break
    return sum(recent) / len(recent) if recent else None


def _cached_share(turn: Mapping[str, Any]) -> float | None:
    cached, prompt = turn.get("cached_tokens"), turn.get("prompt_tokens")
    if isinstance(cached, int) and isinstance(prompt, int) and prompt > 0:
        return min(1.0, cached / prompt)
    return None


def _uncounted(line: str) -> bool:
    """The line's record, if it is one, surely has no `cached_tokens` count: the key is
    absent or only null, and no escape (a backslash) could spell it another way."""
    if "\\" in line:
        return False
    n = line.count("cached_tokens")
    return n == 0 or (n == 1 and '"cached_tokens":null' in line)


def _log_hit_ratio(lines: list[str], window: int) -> float | None:
    """`observed_hit_ratio` over stored lines: most upstreams report the same (a count or
    null) on every turn, so it decodes about `window` + 1 lines, or none."""
    recent: list[float] = []
    j, known = len(lines) - 1, None  # known: the last line decoded, (index, record)
    while j > 0:
        if _uncounted(lines[j]):
            j -= 1
            continue
        later = known[1] if known is not None and known[0] == j else decode(lines[j])
        j -= 1
        ratio = None if later is None else _cached_share(later)
        if ratio is None:
            continue
        # Its predecessor: the nearest record before it (damaged lines do not count).
        earlier, k = None, j
        while earlier is None and k >= 0:
            earlier, k = decode(lines[k]), k - 1
        if earlier is None:
            break
        known = (k + 1, earlier)
        if earlier.get("compaction", "none") == "none":
            recent.append(ratio)
            if len(recent) == window:
                break
    return sum(recent) / len(recent) if recent else None


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
    # What level 1 learned from the model's look-backs (`proxy.session.asked_back`): reclaim
    # key -> "keep" (never reclaimed) or "double" (counts half toward the kept results).
    reclaim_policy: dict[str, str] = field(default_factory=dict)
    # Savings forgone so far by deferring: what the best compaction would have saved on each
    # turn since the session first went over the threshold. A compaction runs once this
    # reaches its cost (rent until the rent paid equals the price, then buy), so a session
    # that ends soon after crossing the threshold never pays for a compaction it could not
    # earn back. The compactor updates it; the caller stores it with the session.
    accrued: float = 0.0
    # The first compaction of a session also adds the proxy's tool to the request, which
    # changes the tools block ahead of every message: the whole prompt is re-sent uncached,
    # the tools block (and the tool added to it) included.
    rewrites_all: bool = False
    # Characters of what goes ahead of the messages and no compaction removes: the tools
    # block (with the proxy's tool when the compaction adds it). Part of the prompt's
    # tokens, so a compaction's estimates leave it out of what it removes, and keep it in
    # what it rewrites when `rewrites_all`.
    fixed_chars: int = 0
    # Price of writing a prompt token into the cache, relative to uncached input
    # (`write_factor_for`): 1.0 where writes are free, 1.25 / 2.0 for Anthropic's 5-minute /
    # 1-hour cache, 1.25 for OpenAI from GPT-5.6 on.
    write_factor: float = 1.0
    # Share of an uncached prompt the upstream writes into its cache (observed from the
    # usage's cache writes; 1.0 when unreported: every uncached token written).
    write_share: float = 1.0
    # The session's prompt cache has expired since its last request
    # (`proxy.compaction.cache_life`): this request pays its whole prompt uncached whatever
    # happens, so a compaction now rewrites nothing still cached, and a summary request that
    # repeats the conversation reads none of it from the cache either.
    cache_cold: bool = False

    @property
    def write_price(self) -> float:
        """Price of an uncached prompt token: its cache write, where it is written."""
        return 1.0 + self.write_share * (self.write_factor - 1.0)

    @property
    def effective_price(self) -> float:
        """Price of a prompt token that an append-only turn would have sent (cached, or
        not and written)."""
        return self.hit_ratio * self.cache_factor + (1.0 - self.hit_ratio) * self.write_price

    def ceiling(self) -> int:
        """The hard limit: the model's window minus room for the reply."""
        window = self.context_window or DEFAULT_CONTEXT_WINDOW
        return max(1, window - self.reply_reserve)

    @property
    def price_now(self) -> float:
        """Price of a prompt token sent at this request: cached as usual, or not at all once
        the cache has gone cold."""
        return self.write_price if self.cache_cold else self.effective_price

    def rewrite_cost(self, tokens: float) -> float:
        """Extra cost of sending `tokens` uncached once (written into the cache again)
        instead of at the price an append-only turn pays for them: none when the cache is
        cold, since the append-only turn would send them uncached too."""
        return tokens * (self.write_price - self.price_now)

    def saving_per_turn(self, removed: float) -> float:
        return removed * self.effective_price

    def may_summarize(self, size: int, share: float = 1.0) -> bool:
        """No loops: a new summary only once the session grew by more than `share` of what
        the last one removed."""
        if self.size_after_summary is None:
            return True
        return size - self.size_after_summary > share * self.removed_by_summary
