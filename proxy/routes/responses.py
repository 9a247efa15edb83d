"""POST /v1/responses: the compacting path for the Responses API in stateless mode.

The turn itself is `proxy.pipeline`; the Responses side of it is `proxy.wire.responses`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.routes.models import serve
from proxy.wire.responses import ResponsesWire

_WIRE = ResponsesWire()


async def responses(request: Request) -> Response:
    return await serve(request, _WIRE)
