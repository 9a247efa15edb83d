"""The record of a session's last turns: one small JSON object each, kept for operators (the
admin API, the viewer's chart) and for the cost model's observed cache-hit ratio.

Every turn loads and saves the session's state, but the turn records are read only now and
then. So they are kept as text, one JSON object a line (orjson never writes a raw newline),
inside the state: parsing or writing the state then copies one string instead of building
or serialising 300 dicts (for a 300-turn state, 0.13 ms of the 0.15 ms its parse took), and
the records are decoded only when something reads them. Pure code: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

MAX_TURNS_KEPT = 300


def decode(line: str) -> dict[str, Any] | None:
    """A stored record; None for a line that is not one (a damaged state loses only it)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


class TurnLog:
    """The last turns, oldest first. `append` and `keep_last` never decode the records."""

    __slots__ = ("_count", "_decoded", "_text")

    def __init__(self, text: str = "") -> None:
        self._text = text
        self._decoded: list[dict[str, Any]] | None = None if text else []
        self._count: int | None = None if text else 0  # counted when first asked

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]]) -> TurnLog:
        return cls("\n".join(orjson.dumps(record).decode() for record in records))

    @property
    def text(self) -> str:
        """What the state stores."""
        return self._text

    def records(self) -> list[dict[str, Any]]:
        """The records, decoded; copies (records are flat): changing them changes nothing here."""
        if self._decoded is None:
            self._decoded = [r for r in map(decode, self._text.split("\n")) if r is not None]
        return [dict(record) for record in self._decoded]

    def lines(self) -> list[str]:
        """The stored records as JSON text, oldest first, none decoded (a line may be damaged:
        `decode` reads one, as `records` does)."""
        return self._text.split("\n") if self._text else []

    def last_lines(self, n: int) -> list[str]:
        """The newest `n` lines of `lines()`, found from the end: not the whole log split."""
        text, end = self._text, len(self._text)
        found: list[str] = []
        while text and len(found) < n:
            start = text.rfind("\n", 0, end) + 1
            found.append(text[start:end])
            if start == 0:
                break
            end = start - 1
        return found[::-1]

    def last(self) -> dict[str, Any] | None:
        """The newest record, decoded alone; None when there is none."""
        if not self._text:
            return None
        return decode(self._text[self._text.rfind("\n") + 1 :])

    def __len__(self) -> int:
        if self._count is None:
            self._count = self._text.count("\n") + 1 if self._text else 0
        return self._count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TurnLog) and other._text == self._text

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"TurnLog({len(self)} turns)"

    def append(self, record: dict[str, Any], *, keep: int = MAX_TURNS_KEPT) -> None:
        """Add a turn, then keep the last `keep`."""
        line = orjson.dumps(record).decode()
        count = len(self)
        self._text = f"{self._text}\n{line}" if self._text else line
        self._count = count + 1
        if self._decoded is not None:
            self._decoded.append(orjson.loads(line))
        self.keep_last(keep)

    def keep_last(self, keep: int) -> None:
        """Drop all but the last `keep` turns."""
        extra = len(self) - keep
        if extra <= 0:
            return
        if keep <= 0:
            self._text, self._decoded, self._count = "", [], 0
            return
        self._text = self._text.split("\n", extra)[extra]
        self._count = keep
        if self._decoded is not None:
            del self._decoded[:extra]


__all__ = ["MAX_TURNS_KEPT", "TurnLog", "decode"]
