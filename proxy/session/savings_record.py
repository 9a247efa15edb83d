"""What a session's turns saved: per turn, kept with the turn record, and as running totals.

A turn's record carries `savings` (`turn_savings`): the prompt tokens billed through the proxy,
`sent` (the request's first round: [prompt, cache read, cache write]), `extract` (the proxy's
extract rounds after it) and `summary` (its summary calls), both [prompt, cache read, cache
write, output] and left out when zero; and `direct`, what the client's own request would have
been billed sent directly: [prompt, cache read, cache write]. The direct prompt is the client's
history in the proxy's token estimate, scaled by what this turn's upstream billed per estimated
token of what was sent (the session's calibration when no usage came back). Direct cache reads
follow an append-only prefix: where the client only appended, the previous direct request is
read from the cache, if this session's upstream caches at all (it reported a cache read); direct
cache writes take the share of the uncached prompt this turn's upstream wrote.

The running totals (`SessionState.savings`) are vectors of `FIELDS`, one per hour and model
(`fold`), so a time window can be answered after the turn records are gone; the oldest hours
fold into one bucket (hour 0) past `MAX_BUCKETS`. A shadow turn (`"shadow": true`, with
`"projected_prompt_tokens"`: what the proxy would have sent) counts only in the `shadow_*`
fields, never among the real savings. Money comes from `Price`s at report time. Pure code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.session.history import MAX_TOKEN_COUNT, token_count

FIELDS = (
    "requests",
    "sent_prompt",
    "sent_cached",
    "sent_written",
    "extract_prompt",
    "extract_cached",
    "extract_written",
    "extract_output",
    "summary_prompt",
    "summary_cached",
    "summary_written",
    "summary_output",
    "direct_prompt",
    "direct_cached",
    "direct_written",
    "shadow_requests",
    "shadow_direct",
    "shadow_projected",
)
INDEX = {name: i for i, name in enumerate(FIELDS)}
HOUR = 3600
MAX_BUCKETS = 24 * 31  # a month of hours for one model; older ones fold into hour 0
EARLIER = 0

Vector = list[int]
Buckets = dict[str, Vector]  # "<hour>|<model>" -> FIELDS


def _count(value: Any) -> int:
    """A stored count, when it is one (0 to `MAX_TOKEN_COUNT`), else 0."""
    return token_count(value) or 0


@dataclass(frozen=True)
class Tokens:
    """One billed call's tokens (or a sum of calls)."""

    prompt: int = 0
    cached: int = 0
    written: int = 0
    output: int = 0

    @classmethod
    def of(cls, usage: Any) -> Tokens:
        """From a `proxy.wire.base.Usage` (or anything with its attributes); bad values are 0."""
        if usage is None:
            return cls()
        return cls(
            _count(getattr(usage, "prompt", 0)),
            _count(getattr(usage, "cached", 0)),
            _count(getattr(usage, "written", 0)),
            _count(getattr(usage, "output", 0)),
        )

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.prompt + other.prompt,
            self.cached + other.cached,
            self.written + other.written,
            self.output + other.output,
        )


def total(calls: Iterable[Tokens]) -> Tokens:
    out = Tokens()
    for call in calls:
        out = out + call
    return out


def direct_estimate(
    client_estimate: int, *, sent_estimate: int, billed: int | None, calibration: float | None
) -> int:
    """The client's request in billed tokens: its estimate scaled by what this turn's upstream
    billed per estimated token sent, else by the session's calibration."""
    if billed and sent_estimate > 0:
        return round(billed * client_estimate / sent_estimate)
    return int(client_estimate * calibration) if calibration else client_estimate


def turn_savings(
    model: str,
    rounds: Sequence[Tokens],
    summaries: Sequence[Tokens],
    direct_prompt: int,
    *,
    previous_direct: int | None,
    appended: bool,
    caches: bool,
) -> dict[str, Any]:
    """A turn's `savings` record: see the module docstring."""
    main = rounds[0] if rounds else Tokens()
    later = total(rounds[1:])
    # Every round but the last answered the proxy's extract calls: their output is its cost.
    extract_output = sum(r.output for r in rounds[:-1])
    summary = total(summaries)
    cached = min(previous_direct, direct_prompt) if appended and caches and previous_direct else 0
    uncached = max(0, main.prompt - main.cached)
    share = min(1.0, main.written / uncached) if uncached else 0.0
    out: dict[str, Any] = {"model": model, "sent": [main.prompt, main.cached, main.written]}
    # Most turns make no extract round and no summary: their parts are left out (all zero).
    if later.prompt or extract_output:
        out["extract"] = [later.prompt, later.cached, later.written, extract_output]
    if summary.prompt or summary.output:
        out["summary"] = [summary.prompt, summary.cached, summary.written, summary.output]
    out["direct"] = [direct_prompt, cached, round((direct_prompt - cached) * share)]
    return out


def _ints(value: Any, n: int) -> list[int]:
    items = value if isinstance(value, list) else []
    return [_count(v) for v in items[:n]] + [0] * (n - len(items[:n]))


def vector_of(record: Mapping[str, Any]) -> tuple[str, Vector] | None:
    """A turn record's model and its contribution to the totals; None without savings."""
    savings = record.get("savings")
    if not isinstance(savings, dict):
        return None
    model = str(savings.get("model") or "")
    vec = [0] * len(FIELDS)
    direct = _ints(savings.get("direct"), 3)
    if record.get("shadow"):
        projected = record.get("projected_prompt_tokens")
        vec[INDEX["shadow_requests"]] = 1
        vec[INDEX["shadow_direct"]] = direct[0]
        vec[INDEX["shadow_projected"]] = _count(projected) if projected is not None else direct[0]
        return model, vec
    vec[0] = 1
    for name, at, n in (("sent", 1, 3), ("extract", 4, 4), ("summary", 8, 4), ("direct", 12, 3)):
        vec[at : at + n] = _ints(savings.get(name), n)
    return model, vec


def add(into: Vector, vec: Sequence[int]) -> Vector:
    """`into` plus `vec`, in place (a shorter `into`, stored by an older version, grows).
    A sum stops at `MAX_TOKEN_COUNT`: no total outgrows what the state is written with."""
    if len(into) < len(vec):
        into.extend([0] * (len(vec) - len(into)))
    for i, value in enumerate(vec):
        into[i] = min(into[i] + value, MAX_TOKEN_COUNT)
    return into


def bucket_key(at: float, model: str) -> str:
    return f"{int(at // HOUR) * HOUR}|{model}"


def split_key(key: str) -> tuple[int, str]:
    hour, _, model = key.partition("|")
    return (int(hour) if hour.isdigit() else EARLIER), model


def fold(buckets: Buckets, record: Mapping[str, Any]) -> Vector | None:
    """Add a turn record to the hourly totals; its vector, or None when it has no savings."""
    found = vector_of(record)
    if found is None:
        return None
    model, vec = found
    at = record.get("at")
    stamp = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0
    add(buckets.setdefault(bucket_key(stamp, model), []), vec)
    if len(buckets) > MAX_BUCKETS:
        dated = sorted((k for k in buckets if split_key(k)[0] != EARLIER), key=split_key)
        for key in dated:
            if len(buckets) <= MAX_BUCKETS:
                break
            add(buckets.setdefault(f"{EARLIER}|{split_key(key)[1]}", []), buckets.pop(key))
    return vec


def clean(value: Any) -> Buckets:
    """Stored buckets as read back: only well-formed entries."""
    if not isinstance(value, dict):
        return {}
    return {
        str(k): _ints(v, len(FIELDS))
        for k, v in value.items()
        if isinstance(k, str) and isinstance(v, list)
    }


# -- money ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """What a model costs, in money per million tokens."""

    input: float
    cache_read: float
    cache_write: float
    output: float

    def prompt(self, prompt: int, cached: int, written: int) -> float:
        uncached = max(0, prompt - cached - written)
        return (uncached * self.input + cached * self.cache_read + written * self.cache_write) / 1e6


PriceOf = Callable[[str], Price | None]
MONEY = ("cost_sent", "cost_direct", "cost_saved", "summary_cost", "extract_cost")


def costs(vec: Sequence[int], price: Price) -> dict[str, float]:
    """The money of one model's totals (the first round's output is billed either way)."""
    v = list(vec) + [0] * (len(FIELDS) - len(vec))
    extract = price.prompt(v[4], v[5], v[6]) + v[7] * price.output / 1e6
    summary = price.prompt(v[8], v[9], v[10]) + v[11] * price.output / 1e6
    sent = price.prompt(v[1], v[2], v[3]) + extract + summary
    direct = price.prompt(v[12], v[13], v[14])
    return {
        "cost_sent": sent,
        "cost_direct": direct,
        "cost_saved": direct - sent,
        "summary_cost": summary,
        "extract_cost": extract,
        "projected_cost_saved": (v[16] - v[17]) * price.input / 1e6,
    }


class Tally:
    """One group of a report: token totals over models, and money where prices are known."""

    def __init__(self) -> None:
        self.vec: Vector = [0] * len(FIELDS)
        self.money: dict[str, float] | None = None
        self.unpriced = 0

    def add(self, model: str, vec: Sequence[int], price_of: PriceOf) -> None:
        add(self.vec, vec)
        price = price_of(model)
        if price is None:
            self.unpriced += vec[0] + (vec[15] if len(vec) > 15 else 0)
            return
        money = self.money if self.money is not None else {}
        for name, value in costs(vec, price).items():
            money[name] = money.get(name, 0.0) + value
        self.money = money

    def _money(self, name: str) -> float | None:
        return None if self.money is None else round(self.money[name], 6)

    def totals(self) -> dict[str, Any]:
        v = self.vec
        sent = v[1] + v[4] + v[8]
        return {
            "requests": v[0],
            "prompt_tokens_sent": sent,
            "prompt_tokens_direct": v[12],
            "tokens_saved": v[12] - sent,
            "saved_ratio": round((v[12] - sent) / v[12], 4) if v[12] else None,
            "cache_read_tokens_sent": v[2] + v[5] + v[9],
            "cache_write_tokens_sent": v[3] + v[6] + v[10],
            "cache_read_tokens_direct": v[13],
            "cache_write_tokens_direct": v[14],
            "summary_prompt_tokens": v[8],
            "extract_prompt_tokens": v[4],
            **{name: self._money(name) for name in MONEY},
            "unpriced_requests": self.unpriced,
        }

    def projected(self) -> dict[str, Any]:
        v = self.vec
        return {
            "requests": v[15],
            "prompt_tokens_direct": v[16],
            "prompt_tokens_projected": v[17],
            "tokens_saved": v[16] - v[17],
            "cost_saved": self._money("projected_cost_saved"),
        }


__all__ = [
    "FIELDS",
    "HOUR",
    "MAX_BUCKETS",
    "Buckets",
    "Price",
    "PriceOf",
    "Tally",
    "Tokens",
    "bucket_key",
    "clean",
    "costs",
    "direct_estimate",
    "fold",
    "split_key",
    "total",
    "turn_savings",
    "vector_of",
]
