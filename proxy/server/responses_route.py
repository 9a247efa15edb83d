"""POST /v1/responses: the compacting path for the Responses API in stateless mode.

The turn itself is `proxy.turn.pipeline`; the Responses side of it is
`proxy.wire.responses.adapter`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.server.model_routes import serve
from proxy.wire.responses.adapter import ResponsesWire

_WIRE = ResponsesWire()


async def responses(request: Request) -> Response:
    return await serve(request, _WIRE)
