"""Shadow mode's turn: what the proxy would have sent, worked out beside a request that goes
upstream exactly as the client sent it.

`ShadowPipeline` is the compacting pipeline with two differences: its session state is kept
apart from the session's own (`shadow_session`), and it never calls the upstream. Where the
strategy decides on a summary, the summary is a stand-in of the size the cost-aware strategy
budgets for one (`SUMMARY_MAX_TOKENS`), so the session's later projections carry a summary
of a realistic size, and the state can never send a summary nobody wrote: only shadow turns
read it. `ShadowTap` reads the usage of the passed-through answer as it goes by, and the
turn is recorded with `"shadow": true` and `projected_prompt_tokens`: the prompt tokens of
the request the proxy would have sent, estimated as the proxy estimates a prompt it sends,
scaled by the session's ratio of billed to estimated tokens (here: what the client's own
requests were billed against their estimate).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson
from starlette.requests import Request

from proxy.compaction.escalation import calibrate, calibrated
from proxy.rules import SUMMARY_MAX_TOKENS
from proxy.session.identity import WIRE_MARK, session_key
from proxy.session.json_limits import Written
from proxy.session.rebuild import Rebuild, record_turn
from proxy.store.base import SessionKey
from proxy.turn import billing
from proxy.turn.pipeline import Pipeline
from proxy.turn.shadow_work import ShadowWork
from proxy.upstream.client import Upstream
from proxy.wire.base import JSON, StreamRelay, Usage, Wire
from proxy.wire.sse import SSEDecoder

log = logging.getLogger("proxy.shadow")

SHADOW = "shadow"
# A whole (non-streamed) answer read for its usage up to this size; a bigger one is recorded
# without usage.
MAX_WHOLE_BYTES = 16 * 1024 * 1024
STAND_IN_HEAD = (
    "(Shadow mode: no summary was made. This text stands in for the summary the proxy would "
    "have asked the model for, at the size it budgets for one.)\n"
)


def shadow_session(session_id: str, wire: str) -> str:
    """The store's session part of a shadow state: apart from the session's own (an id that
    is shadowed on some requests and compacted on others keeps two states), read back as the
    same id (`proxy.session.identity.session_header`)."""
    return f"{session_key(session_id, wire)}{WIRE_MARK}{SHADOW}"


def stand_in_summary() -> str:
    """A summary's stand-in, about `SUMMARY_MAX_TOKENS` tokens as the proxy estimates them."""
    line = "shadow summary stand-in.\n"
    room = SUMMARY_MAX_TOKENS * 4 - len(STAND_IN_HEAD)
    return STAND_IN_HEAD + line * (room // len(line))


class ShadowPipeline(Pipeline):
    """A session's turn in shadow mode: prepared (loaded, rebuilt, compacted) as usual, never
    sent; `finish` records what was billed for the client's own request and what the proxy
    would have sent instead."""

    def __init__(
        self,
        request: Request,
        body: JSON,
        session_id: str,
        wire: Wire,
        upstream: Upstream | None = None,
        written: Written | None = None,
    ) -> None:
        super().__init__(request, body, session_id, wire, upstream, written)
        self.turn.ahead = None  # its summaries are stand-ins, made at once: none written ahead
        key = self.turn.key
        self.turn.key = SessionKey(tenant=key.tenant, session=shadow_session(session_id, wire.name))
        self.log_fields[SHADOW] = True
        self.stand_ins = 0
        self.projected: int | None = None

    async def post_summary(
        self,
        chat_body: JSON,
        bill: Callable[[Usage | None], None] | None = None,
        *,
        background: bool = False,
    ) -> JSON:
        """No summary request goes upstream in shadow mode: a stand-in of a summary's size."""
        self.stand_ins += 1
        message = {"role": "assistant", "content": stand_in_summary()}
        return {"choices": [{"index": 0, "message": message}], "usage": {}}

    def prepared(self) -> bool:
        """Whether the preparation left a turn to record (not a store outage, a side request)."""
        return self.turn.rb is not None

    def direct_estimate(self, rb: Rebuild) -> int:
        """The proxy's estimate of the client's own request (what went upstream)."""
        return billing.client_estimate(rb, self.wire.tools(self.client_body))

    def projected_prompt_tokens(self, rb: Rebuild) -> int:
        """The prompt tokens of the request the proxy would have sent, calibrated."""
        estimate = rb.sent_estimate() + billing.tools_tokens(self.turn.upstream_tools())
        return calibrated(estimate, rb.state.calibration)

    def record(self, rb: Rebuild, usage: Usage | None) -> None:
        """The turn's record: the client's request's usage as billed, `shadow`, and the
        projection. The state's size is the projected one: the trigger reads what the proxy
        would have sent, not what the client did."""
        state = rb.state
        state.wire = self.wire.name
        billed = usage.prompt if usage is not None else None
        if billed:
            calibrate(state, billed, self.direct_estimate(rb))
        projected = self.projected = self.projected_prompt_tokens(rb)
        model = str(self.client_body.get("model") or "")
        estimate = calibrated(self.direct_estimate(rb), state.calibration)
        saved = billing.shadow_record(model, usage, estimate)
        record_turn(
            rb,
            total_tokens=usage.total if usage is not None else None,
            prompt_tokens=billed,
            cached_tokens=usage.cached if usage is not None else None,
            written_tokens=usage.written if usage is not None else None,
            compaction=self.turn.compaction,
            extra={SHADOW: True, "projected_prompt_tokens": projected, "savings": saved},
            now=self.arrived,
        )
        billing.count(rb, saved)  # in the projected totals only (proxy.session.savings_record)
        state.total_tokens = projected + _output_tokens(usage)

    async def finish(self, usage: Usage | None, *, save: bool = True) -> None:
        """Record and save the shadow state, then note the turn for the logs."""
        rb = self.turn.rb
        if rb is not None and save:
            try:
                self.record(rb, usage)
            except Exception:  # the shadow's trouble never reaches the request
                log.exception("recording the shadow turn failed")
            else:
                await self.turn.save(wait=False)
        upstream_ms = self.log_fields.get("upstream_ms")  # the pass-through's, not ours (0)
        await super().finish(usage, save=False)
        self.log_fields.update(
            upstream_ms=upstream_ms,
            projected_prompt_tokens=self.projected,
            summary_calls=0,
            summary_stand_ins=self.stand_ins,
        )


def _output_tokens(usage: Usage | None) -> int:
    if usage is None:
        return 0
    if usage.total is not None and usage.prompt is not None:
        return max(0, usage.total - usage.prompt)
    return usage.output or 0


class ShadowTap:
    """Reads the usage of the passed-through answer as it goes by (`proxy.server.forward.Tap`),
    then finishes the shadow turn: recorded for a whole 200 answer, only logged otherwise."""

    def __init__(
        self,
        pipeline: ShadowPipeline,
        status: int,
        content_type: str,
        work: ShadowWork | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.work = work  # the turn's preparation (None: already prepared)
        self.ok = status == 200
        self.sse = "text/event-stream" in content_type.lower()
        self.decoder = SSEDecoder() if self.sse else None
        self.relay: StreamRelay | None = None
        self.body = bytearray()
        self.complete = False
        self.broken = not self.ok
        self.closed = False

    def feed(self, chunk: bytes) -> None:
        if self.broken:
            return
        try:
            if self.decoder is None:
                if len(self.body) + len(chunk) > MAX_WHOLE_BYTES:
                    self.broken = True
                    return
                self.body += chunk
                return
            if self.relay is None:
                self.relay = self.pipeline.wire.stream_relay(self.pipeline.client_body)
            for event in self.decoder.feed(chunk):
                self.relay.feed(event.event, event.data, event.raw)
        except Exception:
            log.warning("reading the shadowed answer failed", exc_info=True)
            self.broken = True

    def end(self) -> None:
        self.complete = True

    def usage(self) -> Usage | None:
        """What the upstream billed for the client's request, when the answer says."""
        if self.broken:
            return None
        try:
            if self.decoder is not None:
                relay = self.relay or self.pipeline.wire.stream_relay(self.pipeline.client_body)
                for event in self.decoder.flush():
                    relay.feed(event.event, event.data, event.raw)
                return relay.end_round().usage
            return self.pipeline.wire.reply_round(orjson.loads(bytes(self.body))).usage
        except Exception:  # an answer the wire cannot read: recorded without usage
            log.info("no usage in the shadowed answer", exc_info=True)
            return None

    async def close(self) -> None:
        """Finish the shadow turn: now when it is prepared, else once it is (in the
        background: the answer's end never waits for it)."""
        if self.closed:  # the relay closes it at the body's end, its background task again
            return
        self.closed = True
        if self.work is None or self.work.done:
            await self._finish(self.work is None or self.work.ok)
        else:
            self.work.then(self._finish)

    async def _finish(self, prepared: bool) -> None:
        if not prepared:
            return  # no shadow turn came of it (failed, nothing to shadow, over its budget)
        try:
            if self.ok and self.complete:
                await self.pipeline.finish(self.usage())
            else:  # refused or cut short: nothing recorded, as a compacted turn would do
                await self.pipeline.finish(None, save=False)
        except Exception:
            log.exception("finishing the shadow turn failed")


__all__ = ["SHADOW", "ShadowPipeline", "ShadowTap", "shadow_session", "stand_in_summary"]
