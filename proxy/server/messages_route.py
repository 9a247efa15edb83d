"""POST /v1/messages (also ?beta=true): the compacting path for Anthropic's Messages API.

The turn itself is `proxy.turn.pipeline`; the Messages side of it is `proxy.wire.messages.adapter`.
It goes to `upstream.anthropic_base_url`, as do `/v1/messages/count_tokens` and the other
`/v1/messages/...` routes (passed through).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.server.model_routes import serve
from proxy.wire.messages.adapter import MessagesWire

_WIRE = MessagesWire()


async def messages(request: Request) -> Response:
    return await serve(request, _WIRE, request.app.state.anthropic_upstream)
