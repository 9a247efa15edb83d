"""POST /v1/chat/completions: the compacting path (with a session header) and its fallbacks.

Orchestration only: the session state, rebuild and compaction live in `proxy.turn` and the
pure core, the extract-tool filtering in `proxy.relay`, the HTTP plumbing in
`proxy.upstream`. Requests without a session header go through `proxy.routes.forward`.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.compact import CompactorAbstract
from proxy.economics import Economics, cache_factor_for, observed_hit_ratio
from proxy.errors import InvalidRequest, PayloadTooLarge, ProxyError, UpstreamError
from proxy.extract_tool import answer
from proxy.relay import (
    StreamRound,
    error_event,
    finish_chunk,
    relay_event,
    usage_chunk,
    usage_sum,
    visible_message,
)
from proxy.routes.disconnect import unless_client_leaves
from proxy.routes.forward import forward
from proxy.session import add_hidden, record_turn
from proxy.sse import DONE, SSEDecoder
from proxy.store.base import SessionKey
from proxy.summarizer import ContextLengthExceeded, is_context_length_error
from proxy.turn import Turn, learned_window, tenant_of
from proxy.upstream import Upstream, UpstreamResponse, read_response, timed_chunks

log = logging.getLogger("proxy.chat")

CHAT_PATH = "/chat/completions"
MAX_SESSION_ID_CHARS = 16384
# Compact once a prompt passes this share of a known context window: room for the reply.
WINDOW_SHARE = 0.75
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body exceeds the proxy's limit of {limit} bytes.")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body exceeds the proxy's limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def session_id_of(request: Request, names: list[str]) -> str | None:
    for name in names:
        value = request.headers.get(name)
        if value:
            return value
    return None


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc.msg}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if not isinstance(body.get("messages"), list):
        raise InvalidRequest(
            "'messages' must be a list of messages.", param="messages", code="invalid_type"
        )
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest(
            "'stream_options' must be an object.", param="stream_options", code="invalid_type"
        )
    return body


class ChatHandler:
    """One compacting chat request, from the parsed body to the response."""

    def __init__(self, request: Request, body: dict[str, Any], session_id: str) -> None:
        app_state = request.app.state
        self.request = request
        self.settings = app_state.settings
        self.upstream: Upstream = app_state.upstream
        self.compactor: CompactorAbstract = app_state.compactor
        self.metrics = getattr(app_state, "metrics", None)
        self.client_body = body
        self.stream = bool(body.get("stream"))
        self.wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.headers = self.upstream.forward_headers(request.headers)
        self.headers["content-type"] = "application/json"
        key = SessionKey(tenant=tenant_of(request.headers.get("authorization")), session=session_id)
        self.turn = Turn(key=key, store=app_state.store, body=body)
        self.upstream_ms = 0.0
        self.extract_calls = 0
        self.upstream_headers: list[tuple[str, str]] = []
        self.log_fields: dict[str, Any] = getattr(request.state, "log_fields", None) or {}
        request.state.log_fields = self.log_fields

    # -- preparation --------------------------------------------------------------------
    def threshold(self) -> int:
        """The trigger: the header override or the setting, kept below the model's window."""
        value = self.request.headers.get("x-xun-token-threshold", "")
        threshold = int(value) if value.isdigit() and int(value) > 0 else None
        threshold = threshold or int(self.settings.token_threshold)
        window = self.settings.context_windows.get(str(self.client_body.get("model")))
        if self.turn.rb is not None and self.turn.rb.state.context_window:
            window = self.turn.rb.state.context_window
        if window:
            threshold = min(threshold, int(window * WINDOW_SHARE))
        return threshold

    def compaction_enabled(self) -> bool:
        if self.request.headers.get("x-xun-compact", "").lower() == "off":
            return False
        return bool(self.settings.auto_compact_enabled)

    async def post_summary(self, body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            status, data, _ = await self.upstream.post_json(CHAT_PATH, body, self.headers)
        finally:
            self.upstream_ms += (time.perf_counter() - started) * 1000
        if status == 200 and isinstance(data, dict):
            return data
        if is_context_length_error(status, data):
            raise ContextLengthExceeded(str(status))
        raise UpstreamError(f"summary request failed with status {status}")

    async def prepare(
        self, *, force_tokens: int | None = None, threshold: int | None = None
    ) -> None:
        if force_tokens is None:
            await self.turn.load()
        if self.compaction_enabled():
            await self.turn.compact(
                self.compactor,
                threshold=threshold or self.threshold(),
                post=self.post_summary,
                summary_model=self.settings.summary_model,
                force_tokens=force_tokens,
                economics=functools.partial(self.economics, force=force_tokens is not None),
            )
            if self.turn.compaction in ("toolcall", "summary"):
                await self.turn.save()  # a compaction paid for is kept even if the turn fails

    def economics(self, *, force: bool = False) -> Economics | None:
        """What the session's prompt cache is worth, for cost-aware compactors."""
        rb = self.turn.rb
        if rb is None:
            return None
        state = rb.state
        model = str(self.client_body.get("model") or "")
        window = state.context_window or self.settings.context_windows.get(model)
        observed = observed_hit_ratio(state.turns)
        return Economics(
            cache_factor=cache_factor_for(model, self.settings.cache_read_factors),
            hit_ratio=1.0 if observed is None else observed,
            turns=len(state.turn_log),
            # A refusal for length means the window is reached: compact whatever it costs.
            context_window=1 if force else window,
            size_after_summary=state.size_after_summary,
            removed_by_summary=state.removed_by_summary,
            accrued=state.accrued,
            rewrites_all=not state.compacted,
        )

    def upstream_body(self) -> dict[str, Any]:
        body = self.turn.upstream_body()
        if self.stream:
            body = dict(body)
            options = dict(body.get("stream_options") or {})
            options["include_usage"] = True
            body["stream_options"] = options
        return body

    def response_headers(self) -> dict[str, str]:
        """The last upstream round's end-to-end headers, ours added; x-request-id if absent."""
        headers = {
            name: value
            for name, value in self.upstream_headers
            if name not in ("content-type", "content-length")
        }
        headers.setdefault("x-request-id", f"req_{uuid.uuid4().hex}")
        headers["x-xun-session"] = self.turn.key.id
        headers["x-xun-compaction"] = self.turn.compaction if self.turn.rb else "none"
        return headers

    async def reactive(self, error_body: Any) -> bool:
        """After a context-length refusal: compact harder once; True when worth a retry."""
        if self.turn.rb is None or not self.compaction_enabled() or self.turn.degraded:
            return False
        window = learned_window(error_body)
        if window:
            self.turn.rb.state.context_window = window
        threshold = self.threshold()
        before = self.turn.rb.conversation.estimated_message_length()
        await self.prepare(force_tokens=max(threshold * 2, 1), threshold=threshold)
        return self.turn.rb.conversation.estimated_message_length() < before

    # -- upstream calls -----------------------------------------------------------------
    async def open(self, body: dict[str, Any]) -> UpstreamResponse:
        started = time.perf_counter()
        try:
            resp = await self.upstream.send(
                "POST", CHAT_PATH, headers=self.headers, content=orjson.dumps(body)
            )
            self.upstream_headers = self.upstream.response_headers(resp.headers)
            return resp
        finally:
            self.upstream_ms += (time.perf_counter() - started) * 1000

    async def open_checked(
        self, body: dict[str, Any], *, first_round: bool = True
    ) -> tuple[UpstreamResponse | None, Response | None]:
        """Open a round; on an error answer, try reactive compaction once, else relay the error.

        Only the first round may be rebuilt after compacting: later rounds carry the
        proxy's own extract exchanges, which a rebuild would drop.
        """
        for attempt in range(2):
            resp = await self.open(body)
            if resp.status_code == 200:
                return resp, None
            raw = await read_response(resp)
            try:
                data: Any = orjson.loads(raw)
            except orjson.JSONDecodeError:
                data = None
            if (
                attempt == 0
                and first_round
                and is_context_length_error(resp.status_code, data)
                and await self.reactive(data)
            ):
                body = self.upstream_body()
                continue
            return None, Response(
                raw,
                status_code=resp.status_code,
                headers=self.response_headers(),
                media_type=resp.headers.get("content-type"),
            )
        raise AssertionError("unreachable")

    def extract_results(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.extract_calls += len(calls)
        originals = self.turn.rb.originals if self.turn.rb else {}
        return [
            {"role": "tool", "tool_call_id": c.get("id"), "content": answer(c, originals)}
            for c in calls
        ]

    def rounds_left(self, done: int) -> bool:
        return self.turn.injected and done < int(self.settings.max_extract_rounds)

    # -- non-streaming ------------------------------------------------------------------
    async def complete(self) -> Response:
        body = self.upstream_body()
        usages: list[dict[str, Any]] = []
        rounds = 0
        while True:
            resp, error = await self.open_checked(body, first_round=rounds == 0)
            if error is not None:
                await self.finish(None, save=False)
                return error
            assert resp is not None
            raw = await read_response(resp)
            try:
                completion = orjson.loads(raw)
            except orjson.JSONDecodeError:
                await self.finish(None, save=False)
                return Response(raw, status_code=resp.status_code, headers=self.response_headers())
            usages.append(completion.get("usage") or {})
            choice = (completion.get("choices") or [{}])[0]
            message = choice.get("message") or {}
            shown, extract = visible_message(message)
            if extract and self.turn.injected:
                results = self.extract_results(extract)
                if shown.get("tool_calls") is None and self.rounds_left(rounds):
                    rounds += 1
                    body = dict(body)
                    body["messages"] = [*body["messages"], message, *results]
                    continue
                if shown.get("tool_calls"):
                    self.hide(shown["tool_calls"], extract, results)
                elif choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
                choice["message"] = shown
            break
        total = usage_sum(usages)
        if total is not None:
            completion["usage"] = total
        await self.finish(usages[-1])
        headers = self.response_headers()
        return Response(orjson.dumps(completion), media_type="application/json", headers=headers)

    def hide(
        self,
        own: list[dict[str, Any]],
        extract: list[dict[str, Any]],
        results: list[dict[str, Any]],
    ) -> None:
        if self.turn.rb is not None:
            add_hidden(self.turn.rb.state, len(self.turn.rb.messages), own, extract, results)

    async def finish(self, usage: dict[str, Any] | None, *, save: bool = True) -> None:
        """Record the turn's usage, save the state, and note what happened for logs/metrics.

        A turn the upstream refused saves nothing: its history may diverge from the stored
        one (a bad request, a retry), and the session must not start over for it. What a
        compaction decided was already saved when it ran.
        """
        rb = self.turn.rb
        if rb is not None and save:
            if usage:
                details = usage.get("prompt_tokens_details") or {}
                record_turn(
                    rb,
                    total_tokens=usage.get("total_tokens"),
                    prompt_tokens=usage.get("prompt_tokens"),
                    cached_tokens=details.get("cached_tokens")
                    if isinstance(details, dict)
                    else None,
                    compaction=self.turn.compaction,
                )
            await self.turn.save()
        report = self.turn.reports[-1] if self.turn.reports else {}
        self.log_fields.update(
            session=self.turn.key.id[:12],
            tenant=self.turn.key.tenant[:8],
            model=self.client_body.get("model"),
            upstream_ms=round(self.upstream_ms, 2),
            compaction=self.turn.compaction,
            tokens_before=report.get("tokens_before"),
            tokens_after=report.get("estimated_tokens_after"),
            summary_calls=self.turn.summarizer.calls if self.turn.summarizer else 0,
            extract_calls=self.extract_calls,
            degraded=self.turn.degraded,
            store_errors=self.turn.store_errors,
            lease=self.turn.lease,  # how the compaction lease went (see proxy.turn.Turn.lease)
        )

    # -- streaming ----------------------------------------------------------------------
    async def start_stream(self) -> Response:
        body = self.upstream_body()
        resp, error = await self.open_checked(body)
        if error is not None:
            await self.finish(None, save=False)
            return error
        assert resp is not None
        headers = {**SSE_HEADERS, **self.response_headers()}
        return StreamingResponse(
            self.relay(resp, body),
            media_type="text/event-stream",
            headers=headers,
            background=BackgroundTask(resp.aclose),
        )

    async def relay(self, resp: UpstreamResponse, body: dict[str, Any]) -> AsyncIterator[bytes]:
        usages: list[dict[str, Any]] = []
        rounds = 0
        chunk_id: str | None = None
        last_chunk: dict[str, Any] | None = None
        try:
            while True:
                rnd = StreamRound(
                    chunk_id=chunk_id, first_round=rounds == 0, keep_usage_field=self.wants_usage
                )
                async for out in self.relay_round(resp, rnd):
                    yield out
                await resp.aclose()
                chunk_id = rnd.chunk_id
                if rnd.usage:
                    usages.append(rnd.usage)
                last_chunk = rnd.accumulator.to_completion()
                message = rnd.message()
                _, extract = visible_message(message)
                if extract and self.turn.injected:
                    results = self.extract_results(extract)
                    if rnd.only_extract and self.rounds_left(rounds):
                        rounds += 1
                        body = dict(body)
                        body["messages"] = [*body["messages"], message, *results]
                        next_resp, error = await self.open_checked(body, first_round=False)
                        if error is not None:
                            yield error_event(error.body)
                            return
                        assert next_resp is not None
                        resp = next_resp
                        continue
                    own = [c for c in message.get("tool_calls") or [] if c not in extract]
                    if own:
                        self.hide(own, extract, results)
                    elif rnd.only_extract and last_chunk is not None:
                        # Out of extract rounds: end the reply the client saw normally.
                        yield finish_chunk(chunk_id, last_chunk)
                break
            # Saved before the end is sent: a client closes as soon as it reads [DONE].
            await self.finish(usages[-1] if usages else None)
            total = usage_sum(usages)
            if self.wants_usage and total is not None and last_chunk is not None:
                yield usage_chunk(chunk_id, last_chunk, total)
            yield DONE
        except ProxyError as exc:
            log.warning("upstream failed mid-stream: %s", type(exc).__name__)
            yield error_event(None, type(exc).__name__)
        finally:
            await resp.aclose()

    async def relay_round(self, resp: UpstreamResponse, rnd: StreamRound) -> AsyncIterator[bytes]:
        decoder = SSEDecoder()
        timing: dict[str, Any] = {}
        try:
            async for raw in timed_chunks(resp, timing):
                for event in decoder.feed(raw):
                    out = relay_event(event.data, event.raw, rnd)
                    if out:
                        yield out
        finally:
            self.upstream_ms += timing.get("upstream_ms", 0.0)
        for event in decoder.flush():
            out = relay_event(event.data, event.raw, rnd)
            if out:
                yield out


async def chat_completions(request: Request) -> Response:
    settings = request.app.state.settings
    raw = await read_body(request, int(settings.max_body_bytes))
    session_id = session_id_of(request, list(settings.session_headers))
    if session_id is None:
        return await unless_client_leaves(request.receive, forward(request, body=raw))
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidRequest("The session header is too long.", code="invalid_session_id")
    body = parse_body(raw)
    handler = ChatHandler(request, body, session_id)
    try:
        await handler.prepare()
    except Exception:  # compaction or store trouble never fails the request
        log.exception("preparing the session failed, sending uncompacted")
        handler.turn.rb = None
        handler.turn.degraded = "prepare_failed"
    # What a compaction decided is saved already: a client that leaves now only stops the call.
    work = handler.start_stream() if handler.stream else handler.complete()
    return await unless_client_leaves(request.receive, work)
