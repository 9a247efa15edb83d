"""The proxy's own summary request, sent in the session's API and read back: one home for the
turn pipeline's summaries and the admin API's manual ones.

The caller builds the body (`Wire.summary_body`, from the Chat Completions-shaped request the
summariser writes) and hands in its upstream's `post_json`; this module posts it on the wire's
path and reads the answer: a reply as the Chat Completions completion the summariser reads, a
length refusal as `ContextLengthExceeded` (the summariser then splits its request), any other
answer as an `UpstreamError` (the summary fails; the turn goes on uncompacted). Pure: the I/O
is the caller's `post_json`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proxy.errors import ContextLengthExceeded, ProxyError, UpstreamError
from proxy.wire.base import JSON, Usage, Wire
from proxy.wire.refusal import is_length_refusal

PostJson = Callable[[str, JSON, Mapping[str, str]], Awaitable[tuple[int, Any, Any]]]


async def post_summary(
    wire: Wire,
    post_json: PostJson,
    body: JSON,
    headers: Mapping[str, str],
    failures: list[str] | None = None,
    on_reply: Callable[[JSON], None] | None = None,
) -> JSON:
    """Send one summary request; its reply as a Chat Completions completion.

    `on_reply` is handed the upstream's reply as it came, once it reads as a summary (the
    pipeline notes what it was billed). A refusal other than for length is noted in
    `failures` (when given) as the operator should read it, and raised as an `UpstreamError`.
    """
    status, data, _ = await post_json(wire.path, body, headers)
    if status == 200 and isinstance(data, dict):
        reply = wire.summary_reply(data)
        if on_reply is not None:
            on_reply(data)
        return reply
    if is_length_refusal(status, data):
        raise ContextLengthExceeded(str(status))
    if failures is not None:
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        failures.append(f"upstream answered {status}: {message or 'no message'}")
    raise UpstreamError(f"summary request failed with status {status}")


def billed(wire: Wire, note: Callable[[Usage | None], None]) -> Callable[[JSON], None]:
    """An `on_reply` for `post_summary`: what the reply was billed, read in `wire`, handed
    to `note` (None: a reply the summary read but no round, billed unknown)."""

    def read(reply: JSON) -> None:
        try:
            usage = wire.reply_round(reply).usage
        except ProxyError:
            usage = None
        note(usage)

    return read
