"""Shadow mode at the door: a model request goes upstream exactly as the client sent it (the
same bytes, path, query and headers as a pass-through), and its answer comes back as a
pass-through's does, while `proxy.turn.shadow_turn` works out and records what the proxy would
have sent. `--mode shadow` (`XUN_MODE`) for every request, `X-Xun-Compact: shadow` for one;
`X-Xun-Compact: off` always wins. The request goes upstream at once; the shadow work (no
upstream call of its own: about the proxy's overhead on a compacting request) runs beside it
within a time budget (`proxy.turn.shadow_work`), and any failure of it, or a run past its
budget, leaves only a plain pass-through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from proxy.server.content_encoding import decoded_body
from proxy.server.disconnect import unless_client_leaves
from proxy.server.forward import Tap, forward
from proxy.session.json_limits import Written
from proxy.settings import Settings
from proxy.turn.shadow_turn import ShadowPipeline, ShadowTap
from proxy.turn.shadow_work import ShadowWork
from proxy.upstream.client import Upstream, UpstreamResponse
from proxy.wire.base import JSON, Wire

log = logging.getLogger("proxy.shadow")

COMPACT_HEADER = "x-xun-compact"
PENDING = "pending"  # x-xun-shadow while the shadow turn is still worked out
MAX_SESSION_ID_CHARS = 16384


@dataclass(frozen=True)
class Reading:
    """How the model route reads a body (`proxy.server.model_routes`): parsed on from the
    session's last body, and its neutral messages converted on from the last ones, where
    they can be."""

    # decoded bytes -> the body, why it must go up as it came (or None), the body as written
    parse: Callable[[bytes], tuple[JSON, str | None, Written | None]]
    # body, as written, the session's key id -> neutral messages, what the prefix hash reads
    neutral: Callable[[JSON, Written | None, str], tuple[list[JSON], Written | None]]


def requested(headers: Mapping[str, str], settings: Settings) -> bool:
    """Whether this request is shadowed: its `X-Xun-Compact` header, else the proxy's mode."""
    asked = headers.get(COMPACT_HEADER, "").strip().lower()
    if asked in ("shadow", "off"):
        return asked == "shadow"
    return settings.mode == "shadow"


async def serve(
    request: Request,
    wire: Wire,
    upstream: Upstream,
    encoded: bytes,
    session_id: str,
    reading: Reading,
) -> Response:
    """Pass the request through as it came (`encoded`: its body's bytes) at once, and shadow
    it beside (`proxy.turn.shadow_work`)."""
    work, pipeline = None, None
    built = _built(request, wire, upstream, encoded, session_id, reading)
    if built is not None:
        pipeline, prepare = built
        state = request.app.state
        key = pipeline.turn.key.id
        work = ShadowWork(state.shadow, key, prepare, state.settings.shadow_budget)

    def tap(response: UpstreamResponse) -> Tap:
        assert pipeline is not None
        kind = response.headers.get("content-type", "")
        return ShadowTap(pipeline, response.status_code, kind, work)

    passed = forward(request, body=encoded, upstream=upstream, tap=tap if work else None)
    response = await unless_client_leaves(request.receive, passed)
    if pipeline is not None and work is not None and (not await work.settle() or work.ok):
        # Where to find it (admin API), and what it would have done: `pending` while the
        # shadow turn is still being worked out as the answer starts.
        shadowed = pipeline.turn.compaction if work.done else PENDING
        response.raw_headers.append((b"x-xun-session", pipeline.turn.key.id.encode("latin-1")))
        response.raw_headers.append((b"x-xun-shadow", shadowed.encode("latin-1")))
    return response


def _built(
    request: Request,
    wire: Wire,
    upstream: Upstream,
    encoded: bytes,
    session_id: str,
    reading: Reading,
) -> tuple[ShadowPipeline, Callable[[], Awaitable[bool]]] | None:
    """The shadow turn, its body read, and its preparation (whether it left a turn to
    record); None where there is nothing to shadow or the body cannot be read (the request
    then only passes through)."""
    settings: Settings = request.app.state.settings
    if len(session_id) > MAX_SESSION_ID_CHARS:
        return None
    try:
        coding = request.headers.get("content-encoding")
        raw = decoded_body(encoded, coding, settings.max_body_bytes)
        body, blocked, written = reading.parse(raw)
        if blocked:
            return None
        pipeline = ShadowPipeline(request, body, session_id, wire, upstream, written)
    except Exception as exc:  # bad input
        log.info("not shadowing this request: %s", type(exc).__name__)
        return None
    turn = pipeline.turn
    neutral = reading.neutral

    async def prepare() -> bool:
        turn.messages, turn.received_written = neutral(body, written, turn.key.id)
        await pipeline.prepare()
        return pipeline.prepared()

    return pipeline, prepare


__all__ = ["Reading", "requested", "serve"]
