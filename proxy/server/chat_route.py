"""POST /v1/chat/completions: the compacting path (with a session header) and its fallbacks.

The turn itself is `proxy.turn.pipeline`; Chat Completions' side of it is `proxy.wire.chat.adapter`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.server.forward import read_body
from proxy.server.model_routes import serve, session_id_of
from proxy.wire.chat.adapter import ChatWire, parse_body

CHAT_PATH = ChatWire.path
_WIRE = ChatWire()


async def chat_completions(request: Request) -> Response:
    return await serve(request, _WIRE)


__all__ = ["CHAT_PATH", "chat_completions", "parse_body", "read_body", "session_id_of"]
