"""One chat turn of a session: load its state, rebuild, compact, and save what was decided.

This is the orchestration between the pure core (session, compact, merge) and the store;
the compactor's run itself, once the lease is held, is `proxy.turn.compaction_run`.
Every failure here degrades to sending the client's request upstream uncompacted; it is
logged and counted (`store_errors`), never shown to the client.

Concurrency. Requests of one session may run at once (an agent's parallel sub-calls, two
replicas): a compaction runs only under the session's lease (`proxy.turn.lease`), so one state
is never summarised twice. Saves are compare-and-set, merged with another writer's state on
a conflict, and go through the process's `SessionWriter` (`proxy.turn.persist`), one write in
flight per session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.compact import CompactorAbstract
from proxy.compaction.economics import Economics
from proxy.compaction.summarizer import PostFn, Summarizer
from proxy.session.history import UnrecognisedHistory
from proxy.session.json_limits import Written
from proxy.session.rebuild import Rebuild, rebuild
from proxy.session.state import SessionState
from proxy.store.base import SessionKey, Store, StoreError
from proxy.turn import compaction_run
from proxy.turn.asked_back_tally import TurnLookBack
from proxy.turn.lease import LEASE_TTL_S, LEASE_WAIT_S, keep_lease, release_lease, take_lease
from proxy.turn.persist import SETTLE_WAIT_S, SessionWriter, save_turn, stored_state, take_decoded
from proxy.turn.summary_ahead import TurnAhead
from proxy.wire.base import Wire
from proxy.wire.chat.adapter import ChatWire

log = logging.getLogger("proxy.turn")


@dataclass
class Turn:
    """What the proxy decided for one request of a session."""

    key: SessionKey
    store: Store
    body: dict[str, Any]
    rb: Rebuild | None = None
    version: int | None = None
    compaction: str = "none"
    degraded: str | None = None
    injected: bool = False
    summarizer: Summarizer | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)
    store_errors: int = 0
    lease_ttl: float = LEASE_TTL_S
    lease_wait: float = LEASE_WAIT_S
    # How the compaction lease went: none, held, waited, abandoned, timeout or error.
    lease: str = "none"
    saved: bytes | None = field(default=None, init=False, repr=False)
    # The wire format's side (tools, bodies); Chat Completions unless told otherwise.
    wire: Wire = field(default_factory=ChatWire)
    # The neutral messages of the request (Chat Completions: the body's own `messages`).
    messages: Any = None
    # Add the extract tool only from the session's first compaction on (see upstream_tools).
    defer_extract_tool: bool = False
    # Level 1 follows what the model asked back (`auto_compact.adaptive_reclaim`), and what
    # it asks back in this turn (`proxy.turn.asked_back_tally`).
    learn: bool = True
    looked: TurnLookBack = field(default_factory=TurnLookBack)
    # The process's writer (one write in flight per session); None: each save on its own.
    writer: SessionWriter | None = None
    # The client's body as orjson wrote it (`proxy.session.json_limits.Written`), or None.
    written: Written | None = None
    # What the prefix hash reads of `messages`, as written while converting them, set with
    # them (`proxy.wire.neutral_reuse`); or None.
    received_written: Written | None = None
    # Summaries prepared ahead (`proxy.turn.summary_ahead.TurnAhead`); None: made at the crossing.
    ahead: TurnAhead | None = None

    @property
    def history(self) -> Any:
        return self.body.get("messages") if self.messages is None else self.messages

    def rebuild_from(self, state: SessionState | None) -> Rebuild:
        received, written = self.hashed()
        rb = rebuild(self.history, state, written, received, self.wire.unmerge)
        if state is not None and rb.state is not state:  # diverged: a prepared summary stays,
            rb.state.ahead = state.ahead  # to be found stale (and counted) before any use
            rb.state.ahead_seconds = state.ahead_seconds
            rb.state.lookback, rb.state.searches = state.lookback, state.searches  # counted
        if self.ahead is not None:
            self.ahead.check(rb)  # a stale one is dropped (and counted) before anything
        # A client with a tool of our tool's name gets the model's calls to it: no level-1
        # placeholder may send the model there (summaries still apply).
        rb.level1 = not self.wire.defines_extract_tool(self.wire.tools(self.body))
        return rb

    def hashed(self) -> tuple[list[Any] | None, Written | None]:
        """What the prefix hash reads for the history (`Wire.as_received`), and that list as
        orjson wrote it already, if it did: what the wire's conversion wrote of it
        (`received_written`), or the body's own history."""
        history = self.history
        if not isinstance(history, list):
            return None, None
        if self.received_written is not None and history is self.messages:
            return self.received_written.history, self.received_written
        received = self.wire.as_received(history)
        written = self.written
        if written is not None and written.holds(received):
            return received, written
        return received, None

    @property
    def state(self) -> SessionState | None:
        return self.rb.state if self.rb else None

    def store_failed(self, what: str, exc: StoreError) -> None:
        self.store_errors += 1
        log.warning("session store %s failed: %s", what, exc)

    async def load(self) -> None:
        """Read the session's state and rebuild the conversation; degrade on any failure."""
        if self.writer is not None:  # this session's earlier saves first
            await self.writer.settled(self.key.id, wait=SETTLE_WAIT_S)
        try:
            stored = await self.store.get(self.key)
        except StoreError as exc:
            self.store_failed("read (passing through uncompacted)", exc)
            self.degraded = "store_unavailable"
            return
        state = None
        if stored is not None:
            self.version = stored.version
            self.saved = stored.data
            # The object this process's last save of the session wrote, or the bytes decoded.
            taken = None if stored.damaged else take_decoded(self.store, self.key, stored.version)
            state = taken if taken is not None else stored_state(stored)
        try:
            self.rb = self.rebuild_from(state)
        except UnrecognisedHistory as exc:
            self.degraded = "unrecognised_history"
            log.info("history not understood, passing through unchanged: %s", exc)
            return
        if (
            state is not None
            and self.rb.reset_reason == "diverged"
            and state.compacted
            and 2 * len(self.rb.messages) < state.prefix_len
            and not self.rb.floor
        ):
            # A short, unrelated request under a compacted session's id: an agent's side
            # call (Claude Code's title request). It goes up as sent and leaves the session
            # alone, so the conversation's next turn still finds its summary. (Not a history
            # that opens with a provider's compaction: that is the session going on.)
            self.rb = None
            self.degraded = "side_request"
        self.looked.started(self.rb, self.key.id)  # the session's counts, its re-runs

    async def refresh(self) -> bool:
        """Rebuild from the stored state if its version moved; True when it did.

        Raises StoreError.
        """
        assert self.rb is not None
        if await self.store.version(self.key) == self.version:
            return False
        stored = await self.store.get(self.key)
        state = None if stored is None else stored_state(stored)
        if state is not None and state.context_window is None:
            state.context_window = self.rb.state.context_window  # learned by this request
        self.version = None if stored is None else stored.version
        self.saved = None if stored is None else stored.data
        self.rb = self.rebuild_from(state)
        return True

    def over(self, threshold: int, force_tokens: int | None) -> int | None:
        """The projected size when it crosses the threshold, else None."""
        assert self.rb is not None
        projected = self.rb.projected_tokens() if force_tokens is None else force_tokens
        return projected if projected > threshold else None

    async def compact(
        self,
        compactor: CompactorAbstract,
        *,
        threshold: int,
        post: PostFn,
        summary_model: str | None,
        force_tokens: int | None = None,
        economics: Callable[[], Economics | None] | None = None,
    ) -> None:
        """Run the compactor, under the session's lease, when the size crosses the threshold.

        `economics` is asked for the session's costs (cost-aware compactors) once the lease
        is held, so it sees the state as re-read then.
        """
        if self.rb is None or self.over(threshold, force_tokens) is None:
            return
        if not compaction_run.would_compact(
            self, compactor, threshold, force_tokens, summary_model, economics
        ):
            return  # nothing to do: no lease, so the session's requests never queue for it
        token = await take_lease(self, threshold, force_tokens)
        if token is None:
            return
        try:
            projected = self.over(threshold, force_tokens)
            if projected is None:
                return  # what another request saved meanwhile already covers this one
            renewer = asyncio.create_task(keep_lease(self, token))
            try:
                econ = economics() if economics is not None else None
                await compaction_run.run(
                    self, compactor, projected, threshold, post, summary_model, econ
                )
            finally:
                renewer.cancel()
                await asyncio.wait([renewer])
            if self.compaction in ("toolcall", "summary"):
                await self.save()  # before the lease goes: the next holder must see it
        finally:
            await release_lease(self, token)

    def summary_tools(self) -> list[dict[str, Any]] | None:
        tools = self.wire.tools(self.body)
        base = list(tools) if isinstance(tools, list) else []
        if (
            self.rb is not None
            and self.rb.state.compacted
            and not self.wire.defines_extract_tool(base)
        ):
            base = self.wire.with_extract_tool(base)
        return base or None

    def upstream_tools(self) -> Any:
        """The tools to send upstream, setting `injected` when ours is among them.

        Ours goes last, so the client's own prefix stays stable. By default
        (`auto_compact.extract_tool = after_compaction`) it joins a session's requests with
        its first compaction, a point where the prefix changes anyway, and stays from then
        on: a session that never compacts sends exactly the client's tools and pays nothing
        for the proxy. `always` puts it in every request of a session whose client sends
        tools, from the first turn on. A session without tools gets it once something was
        compacted.
        """
        assert self.rb is not None
        tools = self.wire.tools(self.body)
        wanted = self.rb.state.compacted or (
            not self.defer_extract_tool and isinstance(tools, list) and bool(tools)
        )
        self.injected = (
            wanted and not self.wire.defines_extract_tool(tools) and self.wire.can_inject(self.body)
        )
        return self.wire.with_extract_tool(tools) if self.injected else tools

    def upstream_body(self, *, stream: bool = False) -> dict[str, Any]:
        """The client's body with the rebuilt messages and, where it applies, our tool."""
        if self.rb is None:
            return self.wire.upstream_body(self.body, None, None, stream=stream)
        out = self.rb.outgoing()
        written = self.written
        if out.unchanged and written is not None and written.holds(self.body.get(written.field)):
            out.history_json = written.history_json  # a fresh Outgoing, this call's own
        return self.wire.upstream_body(self.body, out, self.upstream_tools(), stream=stream)

    async def save(self, *, wait: bool = True) -> None:
        """Write the state (compare-and-set, merged with a concurrent writer's state).

        `wait=False`, for a turn's last save: the writer writes it while the answer goes
        out, and the session's next request waits for it (`load`).
        """
        if self.rb is None or self.degraded:
            return
        if self.writer is None:
            await save_turn(self)
        elif wait:
            await self.writer.save(self)
        else:
            self.writer.submit(self)
