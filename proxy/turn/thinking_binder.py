"""A turn's thinking blocks kept on their own prefix, whatever the proxy changes before them.

`Binder` stands between the pipeline and the upstream for a wire that binds thinking blocks
to their prefix (Messages: `proxy.wire.messages.binding`): each request it sends, summary
requests included, goes without the blocks a compaction moved onto another prefix, and each
round's reply leaves, in the session's state, the prefix its blocks were written under.
Blocks the session has no record of are kept only when the request goes upstream as the
client wrote it (nothing compacted, no tool added). A body the binding cannot hash goes as
it is: the binding never fails a request.

The hash of a long history is not taken again on every request: what the session's last
request judged (`proxy.wire.messages.binding.Walked`) is kept per session, and a request
that resends those messages hashes only what it added (bounded by sessions and by the bytes
of the histories kept). Pure: no I/O.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from proxy.turn.session_turn import Turn
from proxy.wire.base import JSON, Round, Wire
from proxy.wire.messages.binding import remember

log = logging.getLogger("proxy.pipeline")

MAX_SESSIONS = 32
MAX_BYTES = 48 * 2**20  # the histories the kept walks hold, all sessions together


class Walks:
    """Per session, the last request's walk (`Walked`), with the size of its history."""

    def __init__(self, *, max_sessions: int = MAX_SESSIONS, max_bytes: int = MAX_BYTES) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    def take(self, session: str) -> Any:
        kept = self._kept.pop(session, None)
        if kept is None:
            return None
        self._bytes -= kept[1]
        return kept[0]

    def put(self, session: str, walked: Any, size: int) -> None:
        if walked is None or size > self.max_bytes:
            return
        self._kept[session] = (walked, size)
        self._bytes += size
        while len(self._kept) > self.max_sessions or self._bytes > self.max_bytes:
            _, (_, old) = self._kept.popitem(last=False)
            self._bytes -= old

    def clear(self) -> None:
        self._kept.clear()
        self._bytes = 0


WALKS = Walks()  # process-wide, like the parse the kept histories come from


class Binder:
    """One request's thinking bindings: what its rounds sent, what their replies wrote."""

    def __init__(self, wire: Wire, turn: Turn, log_fields: dict[str, Any]) -> None:
        self.wire = wire
        self.turn = turn
        self.log_fields = log_fields
        self.bound: Any = None  # the last round's request, bound (its prefix hash)

    def bind(self, body: JSON, *, own: bool = True) -> JSON:
        """`body` as it may go upstream; `own`: a round of the client's request (not a
        summary request), whose reply's blocks are bound to it."""
        binder = getattr(self.wire, "bind_thinking", None)
        rb = self.turn.rb
        if binder is None or rb is None:
            return body
        trust = own and not self.turn.injected and not rb.state.compacted
        written = self.turn.written  # the client's history as orjson wrote it: its size
        session = self.turn.key.id if own and written is not None else None
        walked = WALKS.take(session) if session is not None else None
        try:
            bound = binder(body, rb.state.thinking, trust_unknown=trust, walked=walked)
        except (TypeError, ValueError) as exc:  # a body orjson cannot write: sent as it is
            log.warning("thinking binding skipped: %s", type(exc).__name__)
            return body
        if bound is None:
            return body
        if session is not None and written is not None:
            WALKS.put(session, getattr(bound, "walked", None), len(written.history_json))
        if own:
            self.bound = bound
        if bound.removed:
            removed = self.log_fields.get("thinking_removed") or 0
            self.log_fields["thinking_removed"] = removed + bound.removed
        result: JSON = bound.body
        return result

    def note(self, rnd: Round) -> None:
        """Keep the prefix of each thinking block the round's reply wrote."""
        rb = self.turn.rb
        reply_bindings = getattr(self.wire, "reply_bindings", None)
        if self.bound is None or rb is None or reply_bindings is None:
            return
        remember(rb.state.thinking, reply_bindings(self.bound, rnd))
