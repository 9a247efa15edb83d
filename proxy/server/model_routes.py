"""The model routes' shared entry: session header -> compacting pipeline, else pass-through.

Each model route (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`) reads its body,
finds the session header, and hands the request with its wire adapter to `proxy.turn.pipeline`.
Requests without a session header go through `proxy.server.forward` untouched. `/v1/messages`
(also `?beta=true`) goes to `upstream.anthropic_base_url`, as do `/v1/messages/count_tokens` and
the other `/v1/messages/...` routes (passed through).
"""

from __future__ import annotations

import logging
from typing import cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.errors import InvalidRequest, ProxyError
from proxy.server import shadow_route
from proxy.server.content_encoding import decoded_body
from proxy.server.disconnect import unless_client_leaves
from proxy.server.forward import forward, read_body, upstream_for
from proxy.session import identity
from proxy.session.history import UnrecognisedHistory
from proxy.session.json_limits import Written, compaction_blocker
from proxy.turn import streaming, whole_answer
from proxy.turn.body_reuse import BodyReuse
from proxy.turn.pipeline import Pipeline
from proxy.upstream.client import Upstream
from proxy.wire.base import JSON, Unsupported, Wire
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.messages.adapter import MessagesWire
from proxy.wire.neutral_reuse import Converting, NeutralReuse
from proxy.wire.responses.adapter import ResponsesWire

log = logging.getLogger("proxy.models")

MAX_SESSION_ID_CHARS = 16384

_CHAT, _RESPONSES, _MESSAGES = ChatWire(), ResponsesWire(), MessagesWire()


async def chat_completions(request: Request) -> Response:
    """POST /v1/chat/completions."""
    return await serve(request, _CHAT)


async def responses(request: Request) -> Response:
    """POST /v1/responses, stateless mode (the whole history in `input`)."""
    return await serve(request, _RESPONSES)


async def messages(request: Request) -> Response:
    """POST /v1/messages, to the Anthropic upstream."""
    return await serve(request, _MESSAGES, request.app.state.anthropic_upstream)


def session_id_of(request: Request, names: list[str]) -> str | None:
    return identity.session_id_of(request.headers, names)  # UTF-8 when the bytes are UTF-8


async def serve(request: Request, wire: Wire, upstream: Upstream | None = None) -> Response:
    """One model request through `wire`: compacted when it names a session. The proxy's own
    errors answer in the wire's shape (Anthropic's on /v1/messages)."""
    fields = getattr(request.state, "log_fields", None)
    if isinstance(fields, dict):
        fields["wire"] = wire.name  # logs and metrics, passed-through and refused ones too
    try:
        return await _serve(request, wire, upstream)
    except ProxyError as exc:
        body = wire.error_body(exc.status, exc.message, exc.type, exc.code, exc.param)
        return JSONResponse(body, status_code=exc.status, headers=exc.headers)


def _neutral(
    request: Request, wire: Wire, body: JSON, written: Written | None, session: str
) -> tuple[list[JSON], Written | None]:
    """The request's neutral messages, converted on from the session's last request's where
    the wire can (`proxy.wire.neutral_reuse`), and what the prefix hash reads of them as written."""
    reuse: NeutralReuse | None = getattr(request.app.state, "neutral_reuse", None)
    if reuse is None or not hasattr(wire, "convert_after"):
        return wire.messages(body), None
    return reuse.messages(session, cast(Converting, wire), body, written)


def _parsed(
    request: Request, wire: Wire, raw: bytes, session: str
) -> tuple[JSON, str | None, Written | None]:
    """The body, why it must go upstream as it came (`compaction_blocker`) or None, and the
    body as written: parsed on from the session's last request where it can be
    (`proxy.turn.body_reuse`)."""
    reuse: BodyReuse | None = getattr(request.app.state, "body_reuse", None)
    if reuse is not None:
        # Keyed as the session is (its wire too): a body is only ever read on from its wire's.
        keyed = identity.session_key(session, wire.name)
        return reuse.parse(keyed, raw, wire.history_field, wire.parse, wire.accept)
    body = wire.parse(raw)
    blocked, written = compaction_blocker(raw, body, wire.history_field)
    return body, blocked, written


async def _serve(request: Request, wire: Wire, upstream: Upstream | None) -> Response:
    settings = request.app.state.settings
    upstream = upstream or upstream_for(request)  # Anthropic's headers: Anthropic's upstream
    raw = await read_body(request, int(settings.max_body_bytes))
    session_id = session_id_of(request, list(settings.session_headers))
    if session_id is None:
        passed = forward(request, body=raw, upstream=upstream)
        return await unless_client_leaves(request.receive, passed)
    if shadow_route.requested(request.headers, settings):  # as sent, and what it would have been
        reading = shadow_route.Reading(
            parse=lambda decoded: _parsed(request, wire, decoded, session_id),
            neutral=lambda body, written, key: _neutral(request, wire, body, written, key),
        )
        return await shadow_route.serve(request, wire, upstream, raw, session_id, reading)
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidRequest("The session header is too long.", code="invalid_session_id")
    encoded = raw
    raw = decoded_body(raw, request.headers.get("content-encoding"), settings.max_body_bytes)
    body, blocked, written = _parsed(request, wire, raw, session_id)
    if blocked:  # JSON orjson cannot write back exactly: send it as is
        wire.check(body)
        passed = forward(request, body=encoded, upstream=upstream)
        return await unless_client_leaves(request.receive, passed)
    handler = Pipeline(request, body, session_id, wire, upstream, written)
    try:
        turn = handler.turn
        turn.messages, turn.received_written = _neutral(request, wire, body, written, turn.key.id)
        await handler.prepare()
    except ProxyError:  # a request the API would refuse (`Wire.messages`)
        raise
    except Unsupported:
        handler.turn.rb = None
        handler.turn.degraded = "unsupported"
    except UnrecognisedHistory as exc:
        handler.turn.rb = None
        handler.turn.degraded = "unrecognised_history"
        log.info("history not understood, passing through unchanged: %s", exc)
    except Exception:  # compaction or store trouble never fails the request
        log.exception("preparing the session failed, sending uncompacted")
        handler.turn.rb = None
        handler.turn.degraded = "prepare_failed"
    # What a compaction decided is saved already: a client that leaves now only stops the call.
    work = streaming.start_stream(handler) if handler.stream else whole_answer.complete(handler)
    return await unless_client_leaves(request.receive, work)
