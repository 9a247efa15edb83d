"""A whole Chat Completions answer to a stream request, as the one chunk it would have streamed.

Some OpenAI-compatible servers and gateways ignore `stream` and answer with the
`chat.completion` object. `completion_as_chunk` turns it into one `chat.completion.chunk`, and
`relay_completion` relays that like any chunk of a round, so hidden extract calls and tool-call
indexes follow the relay's rules (`proxy.wire.chat.stream`). A body that is not a completion
ends the stream with an error event. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from proxy.errors import UpstreamInvalidResponse
from proxy.wire.chat.checks import check_completion
from proxy.wire.sse import encode_data


class Feeds(Protocol):
    """What relaying a whole completion needs of a stream's round (`stream.StreamRound`)."""

    def feed(self, chunk: dict[str, Any]) -> dict[str, Any] | None: ...


def relay_completion(raw: bytes, rnd: Feeds) -> list[bytes]:
    """The events for a whole `chat.completion` the upstream sent as the answer to a stream
    request (`content-type: application/json`): one chunk, its calls filtered like any
    other; the caller ends the stream as usual. A body that is not a completion raises
    UpstreamInvalidResponse, so the stream ends with an error event instead."""
    completion = check_completion(raw)
    if completion is None or "choices" not in completion:
        raise UpstreamInvalidResponse(
            "The upstream API answered a stream request with a body that is neither an event "
            "stream nor a chat completion."
        )
    chunk = rnd.feed(completion_as_chunk(completion))
    return [encode_data(orjson.dumps(chunk))] if chunk is not None else []


def completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """One `chat.completion.chunk` holding a whole (checked) completion: for an upstream that
    answers a stream request with plain JSON."""
    choices = []
    for i, choice in enumerate(completion.get("choices") or ()):
        delta = dict(choice.get("message") or {})
        calls = delta.get("tool_calls")
        if calls:
            delta["tool_calls"] = [{**call, "index": n} for n, call in enumerate(calls)]
        choices.append(
            {
                "index": choice.get("index", i),
                "delta": delta,
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice.get("finish_reason"),
            }
        )
    chunk: dict[str, Any] = {
        key: completion[key]
        for key in ("id", "created", "model", "system_fingerprint", "service_tier")
        if key in completion
    }
    chunk["object"] = "chat.completion.chunk"
    chunk["choices"] = choices
    if completion.get("usage") is not None:
        chunk["usage"] = completion["usage"]
    return chunk
