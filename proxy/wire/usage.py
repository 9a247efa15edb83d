"""Usage of several upstream rounds as one, for every API: one sum, a table of fields per API.

A turn may take several upstream rounds (the proxy answers its own extract calls and asks
again); the client sees one reply, so it sees one usage: token counts added over the rounds,
every other field as the last round sent it. Each round is billed, so the cache's counts are
added like the others in all three APIs: cached reads (`cached_tokens`,
`cache_read_input_tokens`), cache writes and reasoning tokens alike.

The tables differ only where the APIs do. A count marked `always` is written (0 when no round
sent it) because the API's schema requires it: Chat's and Responses' top-level counts, and
Responses' `cached_tokens` / `reasoning_tokens` inside their details. Any other count is
written only when some round sent it: a count the upstream never reported is not made up.
A value that is not a count (a string, a float, a bool, a negative number) adds 0.
Pure: no I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from proxy.session.history import token_count


@dataclass(frozen=True)
class UsageFields:
    """Where one API keeps its token counts in a usage object."""

    counts: tuple[tuple[str, bool], ...]
    """Top-level counts: (name, written even when no round sent it)."""
    details: tuple[tuple[str, str, bool], ...] = ()
    """Counts in a nested details object: (object, name, written even when no round sent it)."""
    by_key: tuple[str, ...] = ()
    """Nested objects whose every key is a count, added key by key (Anthropic's
    `cache_creation`, `server_tool_use`); a key some round sent as a non-count keeps the last
    round's value."""


CHAT = UsageFields(
    counts=(("prompt_tokens", True), ("completion_tokens", True), ("total_tokens", True)),
    details=(
        ("prompt_tokens_details", "cached_tokens", False),
        ("prompt_tokens_details", "cache_write_tokens", False),  # reported from GPT-5.6 on
        ("completion_tokens_details", "reasoning_tokens", False),
    ),
)
RESPONSES = UsageFields(
    counts=(("input_tokens", True), ("output_tokens", True), ("total_tokens", True)),
    details=(
        ("input_tokens_details", "cached_tokens", True),
        ("input_tokens_details", "cache_write_tokens", False),  # reported from GPT-5.6 on
        ("output_tokens_details", "reasoning_tokens", True),
    ),
)
MESSAGES = UsageFields(
    counts=(
        ("input_tokens", False),
        ("cache_creation_input_tokens", False),
        ("cache_read_input_tokens", False),
        ("output_tokens", False),
    ),
    by_key=("cache_creation", "server_tool_use"),
)


def _count(value: Any) -> int:
    return token_count(value) or 0


def usage_sum(usages: list[Any], fields: UsageFields) -> dict[str, Any] | None:
    """Several rounds' usage as one (None when no round sent one; a lone usage as it is)."""
    found: list[dict[str, Any]] = [u for u in usages if isinstance(u, dict)]
    if len(found) <= 1:
        return found[0] if found else None
    total = copy.deepcopy(found[-1])
    for name, always in fields.counts:
        if always or any(name in u for u in found):
            total[name] = sum(_count(u.get(name)) for u in found)
    for parent, name, always in fields.details:
        details = [u[parent] for u in found if isinstance(u.get(parent), dict)]
        if details and (always or any(name in d for d in details)):
            last = total.get(parent)
            summed = sum(_count(d.get(name)) for d in details)
            total[parent] = {**(last if isinstance(last, dict) else {}), name: summed}
    for parent in fields.by_key:
        parts = [u[parent] for u in found if isinstance(u.get(parent), dict)]
        if parts:
            total[parent] = {key: _by_key(parts, key) for key in _keys(parts)}
    return total


def _keys(parts: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for p in parts for k in p))


def _by_key(parts: list[dict[str, Any]], key: str) -> Any:
    if all(token_count(p.get(key)) is not None for p in parts if key in p):
        return sum(_count(p.get(key)) for p in parts)
    return parts[-1].get(key)
