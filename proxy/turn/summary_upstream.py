"""Summary requests sent to a summary upstream of its own (`--summary-upstream`).

Summaries then go to that server in Chat Completions, whatever the session's API
(`proxy.compaction.summary_transcript`), with `--summary-upstream-api-key` as a bearer token
when one is set. The client's own credentials never go there: the client did not address
that host. What the reply or the transport does wrong is raised for the compaction to catch:
a failed summary sends the request upstream uncompacted, never fails it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from proxy.compaction.summary_transcript import transcript_body
from proxy.settings import Settings
from proxy.upstream.client import Upstream
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.summary import post_summary as post_in_wire


def open_summary_upstream(settings: Settings) -> Upstream | None:
    """The summary upstream's client, when one is configured (closed with the app)."""
    if settings.summary_upstream is None:
        return None
    key = settings.summary_upstream_api_key
    return Upstream(
        settings,
        base_url=settings.summary_upstream,
        api_key=None if key is None else key.get_secret_value(),
    )


def summary_headers(settings: Settings) -> dict[str, str]:
    """Only what the summary upstream needs: its own key, an uncompressed answer."""
    headers = {"accept-encoding": "identity"}
    key = settings.summary_upstream_api_key
    if key is not None:
        headers["authorization"] = f"Bearer {key.get_secret_value()}"
    return headers


async def post_summary(
    upstream: Upstream,
    settings: Settings,
    chat_body: dict[str, Any],
    on_reply: Callable[[dict[str, Any]], None] | None = None,
    *,
    background: bool = False,
) -> dict[str, Any]:
    """One summary request to the summary upstream; its Chat Completions reply (`on_reply`
    is handed it, as `proxy.wire.summary.post_summary` does; `background`: never waits for
    a pool connection)."""
    body = transcript_body(chat_body)
    headers = summary_headers(settings)
    post = functools.partial(upstream.post_json, background=background)
    return await post_in_wire(ChatWire(), post, body, headers, on_reply=on_reply)
