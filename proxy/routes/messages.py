"""POST /v1/messages (also ?beta=true): the compacting path for Anthropic's Messages API.

The turn itself is `proxy.pipeline`; the Messages side of it is `proxy.wire.messages`. It goes
to `upstream.anthropic_base_url`, as do `/v1/messages/count_tokens` and the other
`/v1/messages/...` routes (passed through).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.routes.models import serve
from proxy.wire.messages import MessagesWire

_WIRE = MessagesWire()


async def messages(request: Request) -> Response:
    return await serve(request, _WIRE, request.app.state.anthropic_upstream)
