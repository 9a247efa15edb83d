"""POST /v1/chat/completions: the compacting path (with a session header) and its fallbacks.

The turn itself is `proxy.pipeline`; Chat Completions' side of it is `proxy.wire.chat`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.routes.forward import read_body
from proxy.routes.models import serve, session_id_of
from proxy.wire.chat import ChatWire, parse_body

CHAT_PATH = ChatWire.path
_WIRE = ChatWire()


async def chat_completions(request: Request) -> Response:
    return await serve(request, _WIRE)


__all__ = ["CHAT_PATH", "chat_completions", "parse_body", "read_body", "session_id_of"]
