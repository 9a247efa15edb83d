"""What orjson cannot carry through the compacting path, found before the path is taken.

The compacting path parses a request body with orjson and writes a new one. Two kinds of
valid JSON do not survive that round trip:

- nesting deeper than orjson writes: it reads up to 1024 levels but refuses to write more
  than 254 (`JSONEncodeError`), so the rebuilt body could not be sent at all;
- integers outside orjson's range, -2**63 .. 2**64-1: they are read as floats, so
  `123456789012345678901` would reach the upstream as `1.2345678901234568e+20`.

`compaction_blocker` names the first problem of a parsed body, or None; such a body goes
upstream as the client sent it (the pass-through), uncompacted. Both checks cost little on
ordinary bodies: one `orjson.dumps` (the depth check: nothing cheaper tells structure from
string contents) and a search of its output for floats of 9.2e18 or more, looked for only
where a `+` is (about 40 us for 50 KB together, nearly all of it the dump); only a body
that shows one is parsed again, with the standard library, to look at its integer
literals.

The dump is not thrown away: with `history_field` named, the body is written in two parts
(`Written`), the history's value and the rest with a marker in its place. The prefix hash
(`proxy.session.fingerprint.raw_digests`) reads the history's bytes instead of writing the list
again, and an upstream body that sends the client's history as it came is the rest with those bytes
put back (`Written.body`): the history is written once a request instead of three times. Pure: no
I/O.
"""

from __future__ import annotations

import json
import operator
import re
import uuid
from typing import Any

import orjson

from proxy.errors import DegradeError

ORJSON_INT_MIN = -(2**63)
ORJSON_INT_MAX = 2**64 - 1
# orjson writes a float of 1e16 or more as `<digits>e+<exponent>`; one read from an integer
# literal outside its range is at least 9.2e18, so it is written with an exponent of 18 or more.
# The search starts at the `+`, a literal `re` looks for quickly; the `<digit>e` before it is
# checked by hand (a look-behind would slow every step of the search).
_WIDE_EXPONENT = re.compile(rb"\+(?:1[89]|[2-9][0-9]|[1-9][0-9][0-9])")
_DIGITS = frozenset(b"0123456789")
# `bytes.find` finds a `+` with memchr, faster still, and a `+` is rare in JSON text. Base64
# is not (a thinking block's signature holds one every 64 bytes): past this many, the rest is
# left to `re`.
_PLUSES_LOOKED_AT = 16


class _Wide(DegradeError):
    """An integer literal orjson would have turned into a float."""


def _int_in_range(text: str) -> int:
    value = int(text)
    if not ORJSON_INT_MIN <= value <= ORJSON_INT_MAX:
        raise _Wide
    return value


def _may_hold_wide_float(written: bytes) -> bool:
    """Whether orjson's output holds something written like a float of 9.2e18 or more."""
    looked = 0
    at = written.find(b"+", 2)
    while at != -1:
        if looked == _PLUSES_LOOKED_AT:
            return any(
                _after_digit_e(written, m.start()) for m in _WIDE_EXPONENT.finditer(written, at)
            )
        if _after_digit_e(written, at) and _WIDE_EXPONENT.match(written, at):
            return True
        looked += 1
        at = written.find(b"+", at + 1)
    return False


def _after_digit_e(written: bytes, at: int) -> bool:
    return at >= 2 and written[at - 1] == 0x65 and written[at - 2] in _DIGITS  # `<digit>e+`


def has_wide_int(raw: bytes, written: bytes) -> bool:
    """Whether the JSON text `raw` holds an integer literal outside orjson's range.

    `written` is what orjson writes for the value it read from `raw`: only when that shows a
    large float (or text that looks like one) is `raw` parsed again, with the standard
    library, to look at its integer literals.
    """
    if not _may_hold_wide_float(written):
        return False
    try:
        json.loads(raw, parse_int=_int_in_range)
    except _Wide:
        return True
    except ValueError:  # not JSON (or not UTF-8): orjson has answered for it already
        return False
    return False


# Where the history goes in `Written.rest`: random per process, so no client text is it.
_MARK = f"xun-history-{uuid.uuid4().hex}"
_MARK_JSON = orjson.dumps(_MARK)


def history_mark() -> str:
    """What stands in the history's place in the rest of a `Written` body: a string no
    client sends (random per process)."""
    return _MARK


class Written:
    """A body as orjson writes it, its history field's value (`history`, a list, written as
    `history_json`) apart from the rest.

    `resume` and `end_hash` carry the prefix hash's SHA-256 from a session's request to the
    next (`proxy.session.fingerprint.raw_digests`): `end_hash` is that hash of `history_json`
    once it has read every item, set when the hash is made; `resume` is the last request's, with how
    many items and bytes this history shares with it, set by whoever knows they are the same.
    """

    __slots__ = ("end_hash", "field", "history", "history_json", "resume")

    def __init__(
        self,
        field: str,
        history: list[Any],
        history_json: bytes,
        resume: tuple[int, int, Any] | None = None,
    ) -> None:
        self.field = field
        self.history = history
        self.history_json = history_json
        self.resume = resume
        self.end_hash: Any = None

    def keep_hash(self, state: Any) -> None:
        self.end_hash = state

    def holds(self, value: Any) -> bool:
        """Whether `value` is the written history: that list, or a copy of it (the same
        items, in order)."""
        history = self.history
        if value is history:
            return True
        return (
            isinstance(value, list)
            and len(value) == len(history)
            and all(map(operator.is_, value, history))
        )

    def body(self, body: dict[str, Any]) -> bytes:
        """`orjson.dumps(body)`, for a body whose history is this one: only the rest is
        written, and the history's bytes put in place."""
        rest = orjson.dumps({**body, self.field: _MARK})
        return rest.replace(_MARK_JSON, self.history_json, 1)


def dumps_body(body: dict[str, Any], written: Written | None) -> bytes:
    """`orjson.dumps(body)`; a history that goes up as `written` holds it is not written
    again."""
    if written is not None and written.holds(body.get(written.field)):
        return written.body(body)
    return orjson.dumps(body)


def compaction_blocker(
    raw: bytes, body: Any, history_field: str | None = None
) -> tuple[str | None, Written | None]:
    """Why this body (`raw`, parsed by orjson as `body`) must not take the compacting path:
    "too_deep" or "wide_int", or None when it may; and the body as written, when its
    `history_field` holds a list."""
    history = body.get(history_field) if history_field and isinstance(body, dict) else None
    try:
        if isinstance(history, list):
            parts = [orjson.dumps({**body, history_field: _MARK}), orjson.dumps(history)]
        else:
            parts = [orjson.dumps(body)]
    except orjson.JSONEncodeError:
        return "too_deep", None
    if any(has_wide_int(raw, part) for part in parts):
        return "wide_int", None
    if isinstance(history, list) and history_field:
        return None, Written(history_field, history, parts[1])
    return None, None


__all__ = [
    "ORJSON_INT_MAX",
    "ORJSON_INT_MIN",
    "Written",
    "compaction_blocker",
    "dumps_body",
    "has_wide_int",
    "history_mark",
]
