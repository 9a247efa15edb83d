"""The record of a session's last turns: one small JSON object each, kept for operators (the
admin API, the viewer's chart) and for the cost model's observed cache-hit ratio.

Every turn loads and saves the session's state, but the turn records are read only now and
then. So they are kept as text, one JSON object a line (orjson never writes a raw newline),
inside the state: parsing or writing the state then copies one string instead of building
or serialising 300 dicts (for a 300-turn state, 0.13 ms of the 0.15 ms its parse took), and
the records are decoded only when something reads them.

The log only ever grows at its end between trims, and its stored form keeps that: `json()`
is the text as a JSON string, extended by what each turn appends instead of escaped whole
again, and a full log is trimmed `TRIM_SLACK` turns at a time, not one a turn, so that
consecutive saves share all of the log but its end (a store writes only the pages that
changed: `proxy.session.state.SessionState.to_bytes`). Pure code: no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

MAX_TURNS_KEPT = 300
# A full log holds up to this many turns more before the oldest are dropped, all at once.
TRIM_SLACK = 64


def decode(line: str) -> dict[str, Any] | None:
    """A stored record; None for a line that is not one (a damaged state loses only it)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


class TurnLog:
    """The last turns, oldest first. `append` and `keep_last` never decode the records."""

    __slots__ = ("_count", "_decoded", "_json", "_text")

    def __init__(self, text: str = "") -> None:
        self._text = text
        self._json: bytes | None = None  # the text as a JSON string, once asked for
        self._decoded: list[dict[str, Any]] | None = None if text else []
        self._count: int | None = None if text else 0  # counted when first asked

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]]) -> TurnLog:
        return cls("\n".join(orjson.dumps(record).decode() for record in records))

    @property
    def text(self) -> str:
        """What the state stores."""
        return self._text

    def json(self) -> bytes:
        """`text` as a JSON string (what `orjson.dumps(text)` writes), kept from call to call
        and extended by each `append`."""
        if self._json is None:
            self._json = orjson.dumps(self._text)
        return self._json

    def records(self) -> list[dict[str, Any]]:
        """The records, decoded; copies (records are flat): changing them changes nothing here."""
        if self._decoded is None:
            self._decoded = [r for r in map(decode, self._text.split("\n")) if r is not None]
        return [dict(record) for record in self._decoded]

    def lines(self) -> list[str]:
        """The stored records as JSON text, oldest first, none decoded (a line may be damaged:
        `decode` reads one, as `records` does)."""
        return self._text.split("\n") if self._text else []

    def newest_first(self) -> Iterator[str]:
        """The lines of `lines()` from the newest, found from the end as they are read: a
        reader that stops at the first record it wants never splits the whole log."""
        text, end = self._text, len(self._text)
        while text:
            start = text.rfind("\n", 0, end) + 1
            yield text[start:end]
            if start == 0:
                return
            end = start - 1

    def last_lines(self, n: int) -> list[str]:
        """The newest `n` lines of `lines()`, oldest first: not the whole log split."""
        return list(itertools.islice(self.newest_first(), n))[::-1]

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

    def append(
        self, record: dict[str, Any], *, keep: int = MAX_TURNS_KEPT, slack: int = TRIM_SLACK
    ) -> None:
        """Add a turn; once more than `keep` + `slack` are kept, keep the last `keep`."""
        line = orjson.dumps(record).decode()
        count = len(self)
        added = f"\n{line}" if self._text else line
        self._text += added
        self._count = count + 1
        if self._json is not None:  # JSON escapes character by character: append the escaped
            self._json = self._json[:-1] + orjson.dumps(added)[1:]
        if self._decoded is not None:
            self._decoded.append(orjson.loads(line))
        if self._count > keep + max(0, slack):
            self.keep_last(keep)

    def keep_last(self, keep: int) -> None:
        """Drop all but the last `keep` turns."""
        extra = len(self) - keep
        if extra <= 0:
            return
        self._json = None
        if keep <= 0:
            self._text, self._decoded, self._count = "", [], 0
            return
        self._text = self._text.split("\n", extra)[extra]
        self._count = keep
        if self._decoded is not None:
            del self._decoded[:extra]


__all__ = ["MAX_TURNS_KEPT", "TRIM_SLACK", "TurnLog", "decode"]
