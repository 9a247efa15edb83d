"""A streamed turn's answer: the stream opened, and the relay of the upstream's events to the
client, in the wire's own shape.

Each upstream round goes through the wire's `StreamRelay`, which hides the proxy's extract
calls; the pipeline answers them and asks upstream again, and the client sees one stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy.errors import ProxyError, UpstreamInvalidResponse
from proxy.session.extract_tool import split_calls
from proxy.turn.session_turn import Turn
from proxy.upstream.client import UpstreamResponse, read_response, timed_chunks
from proxy.wire.base import JSON, Round, StreamRelay, Usage, Wire
from proxy.wire.sse import SSEDecoder

log = logging.getLogger("proxy.pipeline")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class Rounds(Protocol):
    """What the relay needs of the turn it streams (`proxy.turn.pipeline.Pipeline`)."""

    wire: Wire
    client_body: JSON
    turn: Turn
    continuations: list[tuple[Round, list[JSON]]]
    upstream_ms: float

    def note_first(self, rnd: Round) -> None: ...
    def extract_results(self, calls: list[JSON]) -> list[JSON]: ...
    def rounds_left(self, done: int) -> bool: ...
    def current_body(self) -> JSON: ...
    def hide(self, rnd: Round, extract: list[JSON], results: list[JSON]) -> None: ...
    async def open_checked(self, body: JSON) -> tuple[UpstreamResponse | None, Response | None]: ...
    async def finish(self, usage: Usage | None, *, save: bool = True) -> None: ...
    def error_response(self, exc: ProxyError) -> Response: ...
    def response_headers(self) -> dict[str, str]: ...


async def start_stream(p: Rounds) -> Response:
    """Open the turn's first round and answer with its relay (or with the upstream's error)."""
    body = p.turn.upstream_body(stream=True)
    resp, error = await p.open_checked(body)
    if error is not None:
        await p.finish(None, save=False)
        return error
    assert resp is not None
    if not readable_stream(resp):  # an HTML page: no event will ever come
        await resp.aclose()
        await p.finish(None, save=False)
        return p.error_response(UpstreamInvalidResponse(NOT_A_STREAM))
    headers = {**SSE_HEADERS, **p.response_headers()}
    return StreamingResponse(
        relay_stream(p, resp, body),
        media_type="text/event-stream",
        headers=headers,
        background=BackgroundTask(resp.aclose),
    )


async def relay_stream(p: Rounds, resp: UpstreamResponse, body: JSON) -> AsyncIterator[bytes]:
    """The client's stream: each upstream round relayed, the proxy's extract rounds hidden
    and answered, the turn finished before the last events."""
    relay = p.wire.stream_relay(p.client_body)
    last_usage: Usage | None = None
    rounds = 0
    hidden_last = False
    try:
        while True:
            async for out in _relay_round(p, resp, relay):
                yield out
            rnd = relay.end_round()
            p.note_first(rnd)
            last_usage = rnd.usage or last_usage
            _, extract = split_calls(rnd.message.get("tool_calls"))
            if extract and p.turn.injected:
                results = p.turn.looked.answered(extract, p.extract_results(extract))
                if rnd.only_extract and p.rounds_left(rounds):
                    rounds += 1
                    await drain(resp)
                    p.continuations.append((rnd, results))
                    body = p.current_body()  # as compacted, if a refusal escalated
                    next_resp, error = await p.open_checked(body)
                    if error is not None:
                        yield relay.error(error.body)
                        return
                    assert next_resp is not None
                    resp = next_resp
                    continue
                p.hide(rnd, extract, results)
                hidden_last = rnd.only_extract
            break
        # Finished (its save queued) before the end is sent: a client closes, and may send
        # its next request, as soon as it reads the end.
        await p.finish(last_usage)
        for out in relay.finish(hidden_last=hidden_last):
            yield out
        await drain(resp)
    except ProxyError as exc:
        log.warning("upstream failed mid-stream: %s", type(exc).__name__)
        yield relay.error(None, type(exc).__name__)
    finally:
        await resp.aclose()


DRAIN_S = 2.0  # how long the body's end may lag the round's last event, the client answered


async def drain(resp: UpstreamResponse) -> None:
    """Read what is left of a round's body after its last event (nothing, or the end of the
    chunked body), so the connection stays reusable; a body that does not end soon, or
    fails, is closed instead (the client's answer is already whole)."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in resp.aiter_raw():
                pass
    except (TimeoutError, ProxyError):
        pass
    await resp.aclose()


NOT_A_STREAM = "The upstream API answered 200 with neither an event stream nor JSON."


def readable_stream(resp: UpstreamResponse) -> bool:
    """Whether a 200 to a stream request can be relayed: an event stream, JSON (answered
    whole), or no content type at all (read as events); an HTML page cannot."""
    kind = (resp.headers.get("content-type") or "").lower()
    return not kind or "text/event-stream" in kind or "json" in kind


async def _relay_round(
    p: Rounds, resp: UpstreamResponse, relay: StreamRelay
) -> AsyncIterator[bytes]:
    if not readable_stream(resp):  # the proxy's extract round: the client's stream is open
        raise UpstreamInvalidResponse(NOT_A_STREAM)
    if "json" in (resp.headers.get("content-type") or "").lower():
        # The upstream answered the stream request with plain JSON: relay it whole (as one
        # chunk), or end the stream with an error event for a wire that cannot.
        whole = getattr(relay, "whole", None)
        raw = await read_response(resp)
        if whole is None:
            raise UpstreamInvalidResponse("The upstream API did not answer with a stream.")
        for out in whole(raw):
            yield out
        return
    decoder = SSEDecoder()
    timing: dict[str, Any] = {}
    try:
        async for raw in timed_chunks(resp, timing):
            for event in decoder.feed(raw):
                for out in relay.feed(event.event, event.data, event.raw):
                    yield out
            if getattr(relay, "round_done", False):
                return  # the round is whole; `drain` reads the body's end after the answer
    finally:
        p.upstream_ms += timing.get("upstream_ms", 0.0)
    for event in decoder.flush():
        for out in relay.feed(event.event, event.data, event.raw):
            yield out
