"""Per session, the last request's neutral messages, for a wire whose conversion is costly.

An agent resends its whole history every turn and adds a few messages at the end. Converting
a 50 KB history to neutral messages takes about 0.45 ms (Messages) or 0.3 ms (Responses),
nearly all of it for the messages the last request converted already. `NeutralReuse` keeps,
per session, the last request's history as orjson wrote it (`proxy.session.json_limits.Written`) and
its conversion; a request whose history starts with those same bytes (under the same
`system`, for Messages) converts only the messages after them (the wire's `convert_after`),
which gives what converting them all gives. Anything else converts in full. What the prefix
hash reads of the neutral messages (`Wire.as_received`) goes on the same way, as a list and
as bytes: the last request's, then only the new messages' (`proxy.session.fingerprint.raw_digests`
cuts its prefix from those bytes instead of writing the list again), and so does that hash:
it goes on from the last request's over the new bytes only (`Written.resume`). The kept
conversions are never changed (a request copies the list; the pipeline edits no neutral
message in place), bounded by sessions, by history size and by bytes in all. Pure: no I/O.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from proxy.session.json_limits import Written

MAX_SESSIONS = 64
MAX_HISTORY_BYTES = 16 * 2**20  # a history larger is not kept
MAX_BYTES = 48 * 2**20  # histories kept, all sessions together


class Converting(Protocol):
    """A wire adapter whose conversion can go on from an earlier request's."""

    def convert_after(self, body: dict[str, Any], before: Any) -> Any:
        """(neutral messages, what a later request may go on from)."""
        ...

    def as_received(self, messages: list[dict[str, Any]]) -> list[Any]: ...


@dataclass(frozen=True)
class _Kept:
    history_json: bytes
    system: Any
    converted: Any
    neutral: list[dict[str, Any]]  # the conversion's messages (never changed)
    received: list[Any]  # `as_received(neutral)`
    # That list as orjson writes it, with the prefix hash made of it (`end_hash`); None if
    # orjson cannot write it.
    written: Written | None

    @property
    def received_json(self) -> bytes | None:
        return self.written.history_json if self.written is not None else None


class NeutralReuse:
    def __init__(self, *, max_sessions: int = MAX_SESSIONS, max_bytes: int = MAX_BYTES) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0
        self.reused = 0  # requests that converted only their new messages

    def messages(
        self, session: str, wire: Converting, body: dict[str, Any], written: Written | None
    ) -> tuple[list[dict[str, Any]], Written | None]:
        """The request's neutral messages, and what the prefix hash reads of them
        (`as_received`) as orjson writes it; raises what the wire's conversion raises."""
        kept = self._kept.pop(session, None)
        if kept is not None:
            self._bytes -= len(kept.history_json)
        system = body.get("system")
        if not (
            kept is not None
            and written is not None
            and kept.system == system
            and _extends(written.history_json, kept.history_json)
        ):
            kept = None
        if kept is not None:
            self.reused += 1
        neutral, converted = wire.convert_after(body, kept.converted if kept else None)
        if kept is not None and _keeps(neutral, kept.neutral):
            received = [*kept.received, *wire.as_received(neutral[len(kept.neutral) :])]
        else:
            kept = None  # its messages are not all this request's: nothing to go on from
            received = wire.as_received(neutral)
        received_json = _received_json(received, kept)
        written_out = None
        if received_json is not None:
            written_out = Written("", received, received_json, _resume(kept))
        if written is not None and len(written.history_json) <= MAX_HISTORY_BYTES:
            self._kept[session] = _Kept(
                written.history_json, system, converted, neutral, received, written_out
            )
            self._bytes += len(written.history_json)
            while len(self._kept) > self.max_sessions or self._bytes > self.max_bytes:
                _, old = self._kept.popitem(last=False)
                self._bytes -= len(old.history_json)
        return list(neutral), written_out

    def clear(self) -> None:
        self._kept.clear()
        self._bytes = 0


def _resume(kept: _Kept | None) -> tuple[int, int, Any] | None:
    """Where the prefix hash of the kept conversion's received list goes on from: its items
    begin this request's list (`_received_json` writes on from their bytes)."""
    written = kept.written if kept is not None else None
    if kept is None or written is None or written.end_hash is None:
        return None
    done = written.history_json
    return (len(kept.received), len(done) - 1, written.end_hash) if len(done) > 2 else None


def _keeps(neutral: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> bool:
    """Whether `neutral` starts with `earlier`'s very messages (which nobody changes)."""
    return len(earlier) <= len(neutral) and all(map(operator.is_, neutral, earlier))


def _received_json(received: list[Any], kept: _Kept | None) -> bytes | None:
    """`orjson.dumps(received)`; with `kept`, a conversion whose messages this one starts
    with, only the part after its bytes is written; None if orjson cannot write it."""
    done = kept.received_json if kept is not None else None
    try:
        if kept is None or done is None or len(done) <= 2:
            return orjson.dumps(received)
        count = len(kept.received)
        if count == len(received):
            return done
        view = memoryview(done)
        return b",".join((view[:-1], memoryview(orjson.dumps(received[count:]))[1:]))
    except orjson.JSONEncodeError:
        return None


def _extends(history: bytes, earlier: bytes) -> bool:
    """Whether the list `history` (as orjson writes it) holds `earlier`'s items first."""
    if len(earlier) <= 2:  # `[]`: nothing to go on from
        return False
    if len(history) == len(earlier):
        return history == earlier
    end = len(earlier) - 1  # where `earlier` closes its list, `history` goes on with a comma
    return history[end : end + 1] == b"," and history.startswith(memoryview(earlier)[:end])
