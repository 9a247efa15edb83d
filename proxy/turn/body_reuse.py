"""Per session, the last request's parsed history, so a request parses only what it adds.

An agent resends its whole history every turn and adds a few items at the end. Parsing a
50 KB body takes 0.1-0.2 ms (one Python object per JSON value, then freeing the last
request's), the blocker check writes it again (`proxy.session.json_limits`), and the cost grows with
the session: 3-5 ms a request at 800 KB. `BodyReuse` keeps, per session, the last request's
raw bytes, its parsed history items and where each item ends in those bytes (and those of
the session's few histories before: an agent's side calls and subagents send theirs under
its id). A request whose bytes start with the same first items as one of them reuses their
objects and parses only the rest; one whose bytes also end as that one's did (the fields
after the history: tools, stream, ...) reuses those fields too.

What it gives is what parsing the whole body gives, and what `compaction_blocker` says of it:

- The bytes are compared, never the values. The first part is the last request's to an item
  boundary, byte for byte; the new items are parsed as a list of their own, at the depth they
  have in the body; the end is either parsed with them or is the last request's own end.
  Whatever JSON the client sends, the value read this way is the value a whole parse reads.
- Kept for a session only when its body is exactly what orjson writes (`Written`), as Codex,
  Claude Code and the OpenAI SDK send it: then item boundaries are where orjson's writing of
  each item says, and the history as written is those same bytes. A body written otherwise
  (spaces, another key order) is parsed whole every time.
- The new items and new fields go through the blocker's checks as a whole body would; the
  reused part passed them when it came.
- Anything unexpected (a duplicate key, a trailing comma, bytes orjson rejects) falls back to
  parsing the whole body, whose error is the one the client gets.

The kept items are never changed (the pipeline edits no message in place, as
`proxy.wire.neutral_reuse` relies on too); each request gets a list of its own. Bounded by sessions
and by bytes in all. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.session.json_limits import Written, compaction_blocker, has_wide_int, history_mark

JSON = dict[str, Any]

log = logging.getLogger("proxy.body_reuse")

MAX_SESSIONS = 64
# Raw bytes kept, all sessions together. A long agent session reaches a million tokens, a
# 4-5 MB body: kept, such a request parses the few hundred bytes it added (a whole parse and
# check of 4 MB is 25-30 ms a request).
MAX_BYTES = 48 * 2**20
MAX_SESSION_BYTES = 16 * 2**20  # a history larger is not kept
LANES = 4  # histories kept per session
# Sessions kept through a lull (`shrink`): the ones that sent last, most likely to come back
# first. A kept history costs about five times its raw bytes (the bytes, the history as
# written, the parsed items): after a burst of 64 sessions at 60 KB, 19 MiB.
IDLE_SESSIONS = 4

_COMMA, _CLOSE = ord(","), ord("]")
_MARK = history_mark()
_MARK_JSON = orjson.dumps(_MARK)
# New items are parsed as the first field of an object of their own: at the depth they have
# in the body, so orjson's nesting limit reads them as it reads the whole body.
_OPENER = b"{" + _MARK_JSON + b":["


@dataclass(frozen=True, slots=True)
class _Kept:
    raw: bytes
    field: str
    head: JSON  # the fields before the history, as parsed
    tail: JSON  # the fields after it
    start: int  # where the history's `[` is in `raw`
    ends: list[int]  # where each item ends (the offset of the `,` or `]` after it)
    items: tuple[Any, ...]
    written: Written  # the history as written, with the prefix hash made of it (`end_hash`)

    @property
    def tail_bytes(self) -> memoryview:
        return memoryview(self.raw)[self.ends[-1] + 1 :]


Parsed = tuple[JSON, str | None, Written | None]


class BodyReuse:
    def __init__(self, *, max_sessions: int = MAX_SESSIONS, max_bytes: int = MAX_BYTES) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        # Per session, its last histories, newest first: an agent's side calls and subagents
        # send theirs under the session's id, between the main conversation's turns.
        self._kept: OrderedDict[str, list[_Kept]] = OrderedDict()
        self._bytes = 0
        self.parsed = 0  # requests of a session
        self.reused = 0  # of those, the ones that parsed only what they added

    def parse(
        self,
        session: str,
        raw: bytes,
        field: str,
        parse: Callable[[bytes], JSON],
        accept: Callable[[JSON], JSON],
    ) -> Parsed:
        """(body, why it must not be compacted or None, the body as written or None), as
        `parse(raw)` and `compaction_blocker(raw, body, field)` give them. `accept` is what
        `parse` checks of a parsed object; both raise what the API would refuse."""
        self.parsed += 1
        lanes = self._take(session)
        try:
            step = _go_on_best([kept for kept in lanes if kept.field == field], raw)
        except Exception:  # a fault here costs the request a whole parse, nothing more
            log.exception("parsing on from the last request failed, parsing it whole")
            step = None
        if step is not None:
            body, blocked, written, used, after = step
            lanes.remove(used)
            self._put(session, [after, *lanes] if after is not None else lanes)
            accept(body)
            self.reused += 1
            return body, blocked, written
        fresh = None
        try:
            body = parse(raw)
            blocked, written = compaction_blocker(raw, body, field)
            if blocked is None and written is not None:
                fresh = _first(raw, body, field, written)
        finally:
            self._put(session, lanes if fresh is None else [fresh, *lanes])
        return body, blocked, written

    def stats(self) -> dict[str, int]:
        """Sessions and histories kept, their raw bytes, and the requests parsed and reused."""
        histories = sum(len(lanes) for lanes in self._kept.values())
        return {
            "sessions": len(self._kept),
            "histories": histories,
            "bytes": self._bytes,
            "parsed": self.parsed,
            "reused": self.reused,
        }

    def shrink(self, sessions: int = IDLE_SESSIONS) -> None:
        """Keep only the `sessions` that sent last: what the idle reclaim leaves (one agent
        pausing between its turns keeps its history; a burst of sessions does not stay in
        memory once it is over)."""
        while len(self._kept) > sessions:
            self._drop_oldest()

    def clear(self) -> None:
        self._kept.clear()
        self._bytes = 0

    def _take(self, session: str) -> list[_Kept]:
        lanes = self._kept.pop(session, [])
        self._bytes -= sum(len(kept.raw) for kept in lanes)
        return lanes

    def _put(self, session: str, lanes: list[_Kept]) -> None:
        lanes = [kept for kept in lanes if len(kept.raw) <= MAX_SESSION_BYTES][:LANES]
        if not lanes:
            return
        self._kept[session] = lanes
        self._bytes += sum(len(kept.raw) for kept in lanes)
        while len(self._kept) > self.max_sessions or self._bytes > self.max_bytes:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, old = self._kept.popitem(last=False)
        self._bytes -= sum(len(kept.raw) for kept in old)


def _first(raw: bytes, body: JSON, field: str, written: Written) -> _Kept | None:
    """What a later request may go on from, if `raw` is exactly what orjson writes."""
    items = written.history
    if not items:
        return None
    rest = orjson.dumps({**body, field: _MARK})
    mark = _MARK_JSON
    at = rest.find(mark)
    history = written.history_json
    after = at + len(history)
    if not (
        at > 0
        and len(raw) == len(rest) - len(mark) + len(history)
        and raw.startswith(memoryview(rest)[:at])
        and raw.startswith(history, at)
        and raw.endswith(memoryview(rest)[at + len(mark) :])
    ):
        return None
    ends = _ends(at, [len(orjson.dumps(item)) for item in items])
    if ends[-1] != after - 1:
        return None
    keys = list(body)
    split = keys.index(field)
    head = {key: body[key] for key in keys[:split]}
    tail = {key: body[key] for key in keys[split + 1 :]}
    return _Kept(raw, field, head, tail, at, ends, tuple(items), written)


def _ends(start: int, sizes: list[int]) -> list[int]:
    """Item end offsets for items of `sizes` bytes written after the `[` at `start`."""
    ends = []
    at = start
    for size in sizes:
        at += 1 + size  # the `[` or `,` before the item, then the item
        ends.append(at)
    return ends


def _go_on_best(
    lanes: list[_Kept], raw: bytes
) -> tuple[JSON, str | None, Written | None, _Kept, _Kept | None] | None:
    """`_go_on` from the kept history that `raw` shares the most items with, and that one."""
    best, count = None, 0
    for kept in lanes:
        same = _same_items(kept, raw)
        if same > count:
            best, count = kept, same
    if best is None:
        return None
    step = _go_on(best, raw, count)
    if step is None:
        return None
    body, blocked, written, after = step
    return body, blocked, written, best, after


def _go_on(
    kept: _Kept, raw: bytes, count: int
) -> tuple[JSON, str | None, Written | None, _Kept | None] | None:
    """The body of `raw` parsed on from the first `count` items of `kept`, its blocker
    verdict, as written, and what the next request may go on from; None when `raw` does not
    go on from them."""
    cut = kept.ends[count - 1]  # `raw[cut]` is the `,` or `]` after the last item reused
    tail_bytes = kept.tail_bytes
    close = len(raw) - len(tail_bytes) - 1
    if close >= cut and raw[close] == _CLOSE and raw.endswith(tail_bytes):
        # The fields after the history are the last request's: parse the new items only.
        new = _new_items(raw[cut:close])
        if new is None:
            return None
        tail = kept.tail
    else:
        parsed = _new_items_and_tail(raw, cut, kept)
        if parsed is None:
            return None
        new, tail = parsed
    head = kept.head
    items = [*kept.items[:count], *new]
    body = {**head, kept.field: items, **tail}
    try:
        dumps = [orjson.dumps(item) for item in new]
        rest = orjson.dumps({**body, kept.field: _MARK}) if tail is not kept.tail else b""
    except orjson.JSONEncodeError:
        return body, "too_deep", None, None
    if any(has_wide_int(raw, part) for part in (*dumps, rest)):
        return body, "wide_int", None, None
    # The new items as orjson writes them, each after its comma: then the history as written
    # is these very bytes (one copy), and the next request may go on from this one.
    ends = [*kept.ends[:count], *_ends(cut, [len(d) for d in dumps])]
    end = ends[-1]
    as_written = (
        len(raw) > end
        and raw[end] == _CLOSE
        and all(
            raw[at - len(d) - 1] == _COMMA and raw.startswith(d, at - len(d))
            for at, d in zip(ends[count:], dumps, strict=True)
        )
    )
    if as_written:
        history_json = raw[kept.start : end + 1]
    else:
        history_json = b",".join((memoryview(raw)[kept.start : cut], *dumps)) + b"]"
    # All the last request's items again: its prefix hash goes on over the new bytes only.
    last = kept.written.end_hash
    resume = None
    if count == len(kept.items) and last is not None:
        resume = (count, cut - kept.start, last)
    written = Written(kept.field, items, history_json, resume)
    after = None
    if as_written:
        after = _Kept(raw, kept.field, head, tail, kept.start, ends, tuple(items), written)
    return body, None, written, after


def _same_items(kept: _Kept, raw: bytes) -> int:
    """How many of the kept items `raw` starts with, byte for byte."""
    ends, old = kept.ends, memoryview(kept.raw)

    def same(k: int) -> bool:  # the first k items, and the `,` or `]` that follows them
        end = ends[k - 1]
        return raw.startswith(old[:end]) and len(raw) > end and raw[end] in (_COMMA, _CLOSE)

    if same(len(ends)):
        return len(ends)
    # The largest k with same(k): it holds for every smaller k when it holds for k.
    return bisect.bisect_left(range(1, len(ends)), True, key=lambda k: not same(k))


def _new_items(between: bytes) -> list[Any] | None:
    """The items after the reused ones: `between` is `` or `,<item>,...,<item>`."""
    if not between:
        return []
    if between[0] != _COMMA:
        return None
    try:
        parsed = orjson.loads(_OPENER + between[1:] + b"]}")
    except orjson.JSONDecodeError:
        return None
    if len(parsed) != 1:  # `between` closed the list and went on: not items only
        return None
    new = parsed[_MARK]
    return new if new else None


def _new_items_and_tail(raw: bytes, cut: int, kept: _Kept) -> tuple[list[Any], JSON] | None:
    """The items after the reused ones and the fields after the history, parsed as one
    object whose first field holds the items."""
    after = raw[cut + 1 :] if raw[cut] == _COMMA else raw[cut:]
    try:
        parsed = orjson.loads(_OPENER + after)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    new = parsed.pop(_MARK, None)
    if not isinstance(new, list) or (raw[cut] == _COMMA and not new):
        return None
    if kept.field in parsed or any(key in kept.head for key in parsed):
        return None  # a field twice: left to a whole parse
    return new, parsed


__all__ = ["BodyReuse"]
