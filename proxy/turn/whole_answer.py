"""A non-streamed turn's answer: each upstream round read whole, the proxy's extract calls
answered and asked upstream again, one reply to the client (streamed: `proxy.turn.streaming`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response

from proxy.errors import UpstreamInvalidResponse
from proxy.session.extract_tool import split_calls
from proxy.upstream.client import read_response
from proxy.wire.base import Round

if TYPE_CHECKING:
    from proxy.turn.pipeline import Pipeline

NOT_JSON = "The upstream API answered 200 with a body that is not JSON."


async def complete(p: Pipeline) -> Response:
    body = p.turn.upstream_body(stream=False)
    rounds: list[Round] = []
    while True:
        resp, error = await p.open_checked(body)
        if error is not None:
            await p.finish(None, save=False)
            return error
        assert resp is not None
        raw = await read_response(resp)
        try:
            rnd = p.wire.reply_round(orjson.loads(raw))
        except orjson.JSONDecodeError:  # a gateway's HTML page, a body cut short
            await p.finish(None, save=False)
            return p.error_response(UpstreamInvalidResponse(NOT_JSON))
        except UpstreamInvalidResponse as exc:
            await p.finish(None, save=False)
            return p.error_response(exc)
        rounds.append(rnd)
        p.note_first(rnd)
        _, extract = split_calls(rnd.message.get("tool_calls"))
        if extract and p.turn.injected:
            results = p.turn.looked.answered(extract, p.extract_results(extract))
            if rnd.only_extract and p.rounds_left(len(rounds) - 1):
                p.continuations.append((rnd, results))
                body = p.current_body()  # as compacted, if a refusal escalated
                continue
            p.hide(rnd, extract, results)
        break
    reply = p.wire.client_reply(p.client_body, rounds, injected=p.turn.injected)
    # Recorded once the answer is out, before the request ends: the next one finds the save.
    return Response(
        orjson.dumps(reply),
        media_type="application/json",
        headers=p.response_headers(),
        background=BackgroundTask(p.finish, rounds[-1].usage),
    )
