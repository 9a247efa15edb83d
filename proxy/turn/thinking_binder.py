"""A turn's thinking blocks kept on their own prefix, whatever the proxy changes before them.

`Binder` stands between the pipeline and the upstream for a wire that binds thinking blocks
to their prefix (Messages: `proxy.wire.messages.binding`): each request it sends, summary
requests included, goes without the blocks a compaction moved onto another prefix, and each
round's reply leaves, in the session's state, the prefix its blocks were written under.
Blocks the session has no record of are kept only when the request goes upstream as the
client wrote it (nothing compacted, no tool added). A body the binding cannot hash goes as
it is: the binding never fails a request. Pure: no I/O.
"""

from __future__ import annotations

import logging
from typing import Any

from proxy.turn.session_turn import Turn
from proxy.wire.base import JSON, Round, Wire
from proxy.wire.messages.binding import remember

log = logging.getLogger("proxy.pipeline")


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
        try:
            bound = binder(body, rb.state.thinking, trust_unknown=trust)
        except (TypeError, ValueError) as exc:  # a body orjson cannot write: sent as it is
            log.warning("thinking binding skipped: %s", type(exc).__name__)
            return body
        if bound is None:
            return body
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
