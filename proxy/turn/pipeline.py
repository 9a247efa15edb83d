"""One compacting turn, whatever the wire format: the request flow of every model route.

route -> wire.parse -> Pipeline.prepare (session key, load, rebuild, compact: threshold and
projected triggers) -> wire.upstream_body -> upstream -> the answer, whole
(`proxy.turn.whole_answer`) or streamed (`proxy.turn.streaming`), the proxy's extract calls
answered here and asked upstream again -> `finish` (`proxy.turn.turn_record`). A context-length
refusal compacts harder and sends again (`proxy.turn.length_escalation`).
`proxy.turn.session_turn.Turn` holds the session's state and the compaction lease; the wire adapter
(`proxy.wire`) knows bodies, streams, usage and error shapes. Every failure of the proxy's own
degrades to sending the request upstream uncompacted.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.compact import CompactorAbstract
from proxy.compaction.cache_life import cache_cold
from proxy.compaction.economics import Economics, cache_factor_for, observed_hit_ratio, write_terms
from proxy.compaction.escalation import ForcedSummary
from proxy.compaction.windows import known_window, threshold_for
from proxy.errors import ProxyError
from proxy.session.extract_tool import split_calls
from proxy.session.hidden_rounds import Answered
from proxy.session.identity import session_key, tenant_of
from proxy.session.json_limits import Written, dumps_body
from proxy.session.state import add_hidden
from proxy.store.base import SessionKey
from proxy.turn import billing, length_escalation, summary_ahead, turn_record
from proxy.turn.session_turn import Turn
from proxy.turn.summary_upstream import post_summary as post_summary_elsewhere
from proxy.turn.thinking_binder import Binder
from proxy.upstream.client import Upstream, UpstreamResponse, read_response
from proxy.wire.base import JSON, Round, Usage, Wire, tools_block_chars
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.refusal import is_length_refusal
from proxy.wire.summary import billed, post_summary

log = logging.getLogger("proxy.pipeline")

# The least `X-Xun-Token-Threshold` asks for: below it, a value counts as this.
MIN_HEADER_THRESHOLD = 1024


class Pipeline:
    """One compacting request of a session, from the parsed body to the response."""

    def __init__(
        self,
        request: Request,
        body: JSON,
        session_id: str,
        wire: Wire,
        upstream: Upstream | None = None,
        written: Written | None = None,  # the client's body as the blocker check wrote it
    ) -> None:
        app_state = request.app.state
        self.request = request
        self.wire = wire
        self.settings = app_state.settings
        # When the request came (`app.state.clock`, which tests set): its turn record's time,
        # and the time the prompt cache's age is measured to. Not read again at the turn's end,
        # which comes after the answer is out, when the client may be sending its next request.
        self.arrived: float = app_state.clock()
        self._cache_cold: bool | None = None
        self.upstream: Upstream = upstream or app_state.upstream
        self.compactor: CompactorAbstract = app_state.compactor
        self.client_body = body
        self.stream = bool(body.get("stream"))
        self.headers = self.upstream.forward_headers(request.headers)
        self.headers["content-type"] = "application/json"
        self.headers.pop("content-encoding", None)  # the body goes up rebuilt, uncompressed
        tenant = tenant_of(request.headers, self.settings.tenant_header)
        key = SessionKey(tenant=tenant, session=session_key(session_id, wire.name))
        writer = getattr(app_state, "writer", None)
        self.turn = Turn(key=key, store=app_state.store, body=body, wire=wire, writer=writer)
        self.turn.written = written
        self.turn.defer_extract_tool = self.settings.extract_tool == "after_compaction"
        self.turn.learn = bool(self.settings.adaptive_reclaim)
        self.turn.ahead = summary_ahead.TurnAhead.of(app_state)  # written before the crossing
        self.upstream_ms = 0.0
        self.extract_calls = 0
        self.answered = Answered()  # the answers' search scopes, for the rounds' records
        # The proxy's own extract rounds of this request, re-applied to a rebuilt body.
        self.continuations: list[tuple[Round, list[JSON]]] = []
        # Escalation after context-length refusals: the steps (from the first), the next one.
        self.ladder: list[CompactorAbstract] | None = None
        self.rung = 0
        self.first_prompt: int | None = None  # the first round's billed prompt
        self.measure = billing.Measure()  # what each upstream call was billed
        self.upstream_headers: list[tuple[str, str]] = []
        self.log_fields: dict[str, Any] = getattr(request.state, "log_fields", None) or {}
        request.state.log_fields = self.log_fields
        self.log_fields["wire"] = wire.name
        self.binder = Binder(wire, self.turn, self.log_fields)
        # The request asks the provider to compact (`proxy.wire.provider_compaction`): the
        # proxy's earlier compactions still apply, so the prefix holds, but it adds none.
        self.provider_compacts = wire.provider_compacts(body)
        if self.provider_compacts:
            self.log_fields["provider_compaction"] = True

    def threshold(self) -> int:
        """The trigger: the header override, the setting, or a share of the model's window."""
        value = self.request.headers.get("x-xun-token-threshold", "")
        override = int(value) if value.isdigit() and int(value) > 0 else None
        if override is not None:  # `1` would make every request a summary and its rounds
            override = max(override, MIN_HEADER_THRESHOLD)
        settings = self.settings
        explicit = override is not None or "token_threshold" in settings.model_fields_set
        setting = override or int(settings.token_threshold)
        model = str(self.client_body.get("model") or "")
        learned = self.turn.rb.state.context_window if self.turn.rb is not None else None
        window = learned or known_window(model, settings.context_windows)
        return threshold_for(setting, explicit=explicit, window=window, learned=bool(learned))

    def compaction_enabled(self) -> bool:
        if self.provider_compacts or self.request.headers.get("x-xun-compact", "").lower() == "off":
            return False
        return bool(self.settings.auto_compact_enabled)

    async def post_summary(
        self,
        chat_body: JSON,
        bill: Callable[[Usage | None], None] | None = None,
        *,
        background: bool = False,
    ) -> JSON:
        """A summary request, made in the session's own API (or in Chat Completions to the
        summary upstream, when one is set); what it was billed goes to `bill` (a summary
        written ahead keeps it for the turn that uses it), else to this turn's savings.
        `background`: a summary written ahead, which never waits for a pool connection."""
        started = time.perf_counter()
        note = bill or self.measure.summary
        elsewhere = getattr(self.request.app.state, "summary_upstream", None)
        try:
            if elsewhere is not None:
                on_reply = billed(ChatWire(), note)
                return await post_summary_elsewhere(
                    elsewhere, self.settings, chat_body, on_reply, background=background
                )
            summary = self.binder.bind(
                self.wire.summary_body(self.client_body, chat_body), own=False
            )
            return await post_summary(
                self.wire,
                functools.partial(self.upstream.post_json, background=background),
                summary,
                self.headers,
                on_reply=billed(self.wire, note),
            )
        finally:
            self.upstream_ms += (time.perf_counter() - started) * 1000

    async def prepare(
        self,
        *,
        force_tokens: int | None = None,
        threshold: int | None = None,
        step: CompactorAbstract | None = None,
    ) -> None:
        """Load and compact as the strategy decides; with `step`, run that escalation step
        (`proxy.compaction.escalation`) instead, forced past the threshold by `force_tokens`."""
        if force_tokens is None:
            await self.turn.load()
            rb = self.turn.rb
            keep = rb.state.pending_summary if rb is not None else None
            if keep is not None and rb is not None and self.compaction_enabled():
                # An operator's summary, asked for without a key of the proxy's own: made
                # now, with this client's credentials, whatever the threshold says.
                rb.state.pending_summary = None
                threshold = threshold or self.threshold()
                step = ForcedSummary(self.settings.toolcall_keep_max, keep)
                force_tokens = max(threshold * 2, 1)
        self.cache_cold()  # judged on the turns before this one, at the request's arrival
        if self.compaction_enabled():
            await self.turn.compact(
                step or self.compactor,
                threshold=threshold or self.threshold(),
                post=self.post_summary,
                summary_model=self.summary_model(),
                force_tokens=force_tokens,
                economics=functools.partial(self.economics, force=force_tokens is not None),
            )
            if self.turn.compaction in ("toolcall", "summary"):
                await self.turn.save()  # a compaction paid for is kept even if the turn fails

    def summary_model(self) -> str | None:
        """The summary model when it is not the session's own: a summary upstream never reads
        the session's cached prefix, so its requests do not repeat it."""
        chosen: str | None = self.settings.summary_model
        if self.settings.summary_upstream is None:
            return chosen
        return chosen or str(self.client_body.get("model") or "")

    def cache_cold(self) -> bool:
        """Whether the session's prompt cache expired since its last request
        (`proxy.compaction.cache_life`); judged once, when first asked."""
        if self._cache_cold is None:
            rb = self.turn.rb
            self._cache_cold = rb is not None and cache_cold(
                rb.state.turn_log,
                self.arrived,
                str(self.client_body.get("model") or ""),
                self.wire.cache_ttl(self.client_body),
                self.settings.cache_lifetimes,
            )
            if self._cache_cold:
                self.log_fields["cache_cold"] = True
        return self._cache_cold

    def economics(self, *, force: bool = False) -> Economics | None:
        """What the session's prompt cache is worth, for cost-aware compactors."""
        rb = self.turn.rb
        if rb is None:
            return None
        state = rb.state
        model = str(self.client_body.get("model") or "")
        window = state.context_window or known_window(model, self.settings.context_windows)
        observed = observed_hit_ratio(state.turn_log)
        ttl = self.wire.cache_ttl(self.client_body)  # the write price depends on it
        writes = write_terms(model, ttl, state.turn_log, self.settings.cache_write_factors)
        return Economics(
            cache_factor=cache_factor_for(model, self.settings.cache_read_factors),
            hit_ratio=1.0 if observed is None else observed,
            turns=len(state.turn_log),
            # A refusal for length means the window is reached: compact whatever it costs.
            context_window=1 if force else window,
            size_after_summary=state.size_after_summary,
            removed_by_summary=state.removed_by_summary,
            accrued=state.accrued,
            # The first compaction rewrites the tools block too when it is what adds the
            # proxy's tool (extract_tool = after_compaction).
            rewrites_all=not state.compacted and self.turn.defer_extract_tool,
            fixed_chars=tools_block_chars(self.wire, self.client_body),
            write_factor=writes[0],
            write_share=writes[1],
            cache_cold=self.cache_cold(),
        )

    def response_headers(self) -> dict[str, str]:
        """The last upstream round's end-to-end headers, ours added; x-request-id if absent."""
        headers = {
            name: value
            for name, value in self.upstream_headers
            if name not in ("content-type", "content-length")
        }
        headers.setdefault("x-request-id", f"req_{uuid.uuid4().hex}")
        headers["x-xun-session"] = self.turn.key.id
        if self.turn.rb is not None:
            headers["x-xun-compaction"] = self.turn.compaction
        else:
            unsupported = self.turn.degraded == "unsupported"
            headers["x-xun-compaction"] = "unsupported" if unsupported else "none"
        return headers

    def current_body(self) -> JSON:
        """The body of the next upstream round: the rebuilt request, then the proxy's own
        extract rounds of this request so far."""
        body = self.turn.upstream_body(stream=self.stream)
        for rnd, results in self.continuations:
            body = self.wire.continue_body(body, rnd, results)
        return body

    async def open(self, body: JSON) -> UpstreamResponse:
        body = self.binder.bind(body)
        started = time.perf_counter()
        try:
            resp = await self.upstream.send(
                "POST",
                self.wire.path,
                headers=self.headers,
                content=dumps_body(body, self.turn.written),
                params=self.request.scope.get("query_string", b""),  # e.g. ?beta=true
            )
            self.upstream_headers = self.upstream.response_headers(resp.headers)
            return resp
        finally:
            self.upstream_ms += (time.perf_counter() - started) * 1000

    async def open_checked(self, body: JSON) -> tuple[UpstreamResponse | None, Response | None]:
        """Open a round; after a context-length refusal compact harder and send again (the
        proxy's extract rounds of this request re-applied), else relay the error."""
        while True:
            resp = await self.open(body)
            if resp.status_code == 200:
                return resp, None
            raw = await read_response(resp)
            try:
                data: Any = orjson.loads(raw)
            except orjson.JSONDecodeError:
                data = None
            if is_length_refusal(resp.status_code, data) and await length_escalation.escalate(
                self, data
            ):
                body = self.current_body()
                continue
            return None, Response(
                raw,
                status_code=resp.status_code,
                headers=self.response_headers(),
                media_type=resp.headers.get("content-type"),
            )

    def extract_results(self, calls: list[JSON]) -> list[JSON]:
        self.extract_calls += len(calls)
        return self.answered.answer(calls, self.turn.rb)

    def rounds_left(self, done: int) -> bool:
        return self.turn.injected and done < int(self.settings.max_extract_rounds)

    def hide(self, rnd: Round, extract: list[JSON], results: list[JSON]) -> None:
        """Keep extract calls made beside the client's own: later rebuilds re-insert them."""
        own, _ = split_calls(rnd.message.get("tool_calls"))
        rb = self.turn.rb
        if own and rb is not None:
            scopes = self.answered.scopes(extract)
            add_hidden(rb.state, len(rb.messages), own, extract, results, scopes)

    def error_response(self, exc: ProxyError) -> Response:
        body = self.wire.error_body(exc.status, exc.message, exc.type, exc.code, exc.param)
        headers = {**self.response_headers(), **exc.headers}
        return JSONResponse(body, status_code=exc.status, headers=headers)

    def note_first(self, rnd: Round) -> None:
        """Keep the first round's billed prompt (to calibrate the estimate), and the prefix
        of each thinking block of every round's reply."""
        if self.first_prompt is None and rnd.usage is not None:
            self.first_prompt = rnd.usage.prompt
        self.measure.round(rnd.usage)
        self.binder.note(rnd)

    async def finish(self, usage: Usage | None, *, save: bool = True) -> None:
        """Record the turn's usage, save the state, and note what happened for logs/metrics.

        The save is written while the answer goes out: the session's next request, and the
        admin API, wait for it before they read. A turn the upstream refused saves nothing:
        its history may diverge from the stored one (a bad request, a retry), and the
        session must not start over for it. What a compaction decided was saved when it ran.
        """
        rb = self.turn.rb
        if rb is not None and save:
            await turn_record.record(self, rb, usage)
        turn_record.note_fields(self, rb, usage)
