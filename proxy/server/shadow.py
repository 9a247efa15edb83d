"""Shadow mode at the door: a model request goes upstream exactly as the client sent it (the
same bytes, path, query and headers as a pass-through), and its answer comes back as a
pass-through's does, while `proxy.turn.shadow` works out and records what the proxy would
have sent. `--mode shadow` (`XUN_MODE`) for every request, `X-Xun-Compact: shadow` for one;
`X-Xun-Compact: off` always wins. The shadow work runs before the request goes upstream
(no upstream call of its own: about the proxy's overhead on a compacting request), and any
failure of it leaves only a plain pass-through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from proxy.server.content_encoding import decoded_body
from proxy.server.disconnect import unless_client_leaves
from proxy.server.forward import Tap, forward
from proxy.session.json_limits import Written
from proxy.settings import Settings
from proxy.turn.shadow import ShadowPipeline, ShadowTap
from proxy.upstream.client import Upstream, UpstreamResponse
from proxy.wire.base import JSON, Wire

log = logging.getLogger("proxy.shadow")

COMPACT_HEADER = "x-xun-compact"
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
    """Pass the request through as it came (`encoded`: its body's bytes) and shadow it."""
    pipeline = await _prepared(request, wire, upstream, encoded, session_id, reading)

    def tap(response: UpstreamResponse) -> Tap:
        assert pipeline is not None
        kind = response.headers.get("content-type", "")
        return ShadowTap(pipeline, response.status_code, kind)

    passed = forward(request, body=encoded, upstream=upstream, tap=tap if pipeline else None)
    response = await unless_client_leaves(request.receive, passed)
    if pipeline is not None:  # where to find it (admin API), and what it would have done
        response.raw_headers.append((b"x-xun-session", pipeline.turn.key.id.encode("latin-1")))
        response.raw_headers.append((b"x-xun-shadow", pipeline.turn.compaction.encode("latin-1")))
    return response


async def _prepared(
    request: Request,
    wire: Wire,
    upstream: Upstream,
    encoded: bytes,
    session_id: str,
    reading: Reading,
) -> ShadowPipeline | None:
    """The shadow turn, loaded and compacted; None where there is nothing to shadow or the
    shadow work failed (the request then only passes through)."""
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
        turn = pipeline.turn
        turn.messages, turn.received_written = reading.neutral(body, written, turn.key.id)
        await pipeline.prepare()
    except Exception as exc:  # bad input, a history the wire cannot read, the store
        log.info("not shadowing this request: %s", type(exc).__name__)
        return None
    if pipeline.turn.rb is None:
        return None  # nothing to record (a store outage, a side request)
    return pipeline


__all__ = ["Reading", "requested", "serve"]
