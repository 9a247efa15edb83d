"""What models cost, for the savings reports: a built-in table the operator extends.

Prices are in US dollars per million tokens: uncached input, cache read, cache write and
output, as the providers list them (OpenAI bills no cache writes: its write price is the
input price). A model matches the longest prefix in the table (`gpt-4o-mini-2024-07-18`
reads `gpt-4o-mini`), after any provider path (`openai/gpt-4o` reads `gpt-4o`); the
operator's entries (`--prices FILE`, `XUN_PRICES`) come first and replace built-in ones.
A model no entry matches has no price: reports then give its tokens, and no money. Pure code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.session.savings_record import Price

MEMO_ENTRIES = 1024
# input, cache read, cache write, output
BUILT_IN: dict[str, tuple[float, float, float, float]] = {
    "gpt-4o": (2.50, 1.25, 2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.075, 0.15, 0.60),
    "gpt-4.1": (2.00, 0.50, 2.00, 8.00),
    "gpt-4.1-mini": (0.40, 0.10, 0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.025, 0.10, 0.40),
    "gpt-5": (1.25, 0.125, 1.25, 10.00),
    "gpt-5-mini": (0.25, 0.025, 0.25, 2.00),
    "gpt-5-nano": (0.05, 0.005, 0.05, 0.40),
    "o3": (2.00, 0.50, 2.00, 8.00),
    "o4-mini": (1.10, 0.275, 1.10, 4.40),
    "claude-opus-4": (15.00, 1.50, 18.75, 75.00),
    "claude-opus-4-5": (5.00, 0.50, 6.25, 25.00),
    "claude-sonnet-4": (3.00, 0.30, 3.75, 15.00),
    "claude-3-7-sonnet": (3.00, 0.30, 3.75, 15.00),
    "claude-3-5-sonnet": (3.00, 0.30, 3.75, 15.00),
    "claude-haiku-4-5": (1.00, 0.10, 1.25, 5.00),
    "claude-3-5-haiku": (0.80, 0.08, 1.00, 4.00),
}


class Prices:
    """The price table: built-in entries under the operator's."""

    def __init__(self, extra: Mapping[str, Mapping[Any, float]] | None = None) -> None:
        table = {name: Price(*values) for name, values in BUILT_IN.items()}
        for name, entry in (extra or {}).items():
            table[name] = Price(
                input=float(entry["input"]),
                cache_read=float(entry.get("cache_read", entry["input"])),
                cache_write=float(entry.get("cache_write", entry["input"])),
                output=float(entry.get("output", 0.0)),
            )
        # Longest prefix first, so `gpt-4o-mini` is found before `gpt-4o`.
        self._ordered = sorted(table.items(), key=lambda item: -len(item[0]))
        self._table = table
        self._found: dict[str, str | None] = {}

    def entry(self, model: str) -> str | None:
        """The table's name for a model (a small vocabulary, for metric labels); None if unknown."""
        if model in self._found:
            return self._found[model]
        name = model.rsplit("/", 1)[-1].lower()
        found = next((p for p, _ in self._ordered if name.startswith(p.lower())), None)
        if len(self._found) < MEMO_ENTRIES:  # names come from clients: a bounded memo
            self._found[model] = found
        return found

    def __call__(self, model: str) -> Price | None:
        """The price of a model; None when no entry matches."""
        prefix = self.entry(model)
        if prefix is None:
            return None
        return self._table[prefix]


__all__ = ["BUILT_IN", "Prices"]
