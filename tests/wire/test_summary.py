"""The one summary POST the pipeline and the admin API share: what each answer becomes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from proxy.errors import ContextLengthExceeded, UpstreamError
from proxy.wire.apis import wire_named
from proxy.wire.summary import post_summary

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "S"}}],
}
REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "S"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 2},
}


def answering(status: int, data: Any, sent: list[tuple[str, Any]]) -> Any:
    async def post_json(path: str, body: Any, headers: Mapping[str, str]) -> tuple[int, Any, Any]:
        sent.append((path, body))
        return status, data, {}

    return post_json


@pytest.mark.parametrize(
    ("api", "path", "reply"),
    [("chat", "/chat/completions", COMPLETION), ("messages", "/messages", REPLY)],
)
async def test_a_reply_is_read_as_a_completion(api: str, path: str, reply: Any) -> None:
    sent: list[tuple[str, Any]] = []
    wire = wire_named(api)
    body = {"model": "m", "messages": []}
    completion = await post_summary(wire, answering(200, reply, sent), body, {})
    assert sent == [(path, body)]
    assert completion["choices"][0]["message"]["content"] == "S"


async def test_a_length_refusal_is_context_length_exceeded() -> None:
    refusal = {"error": {"message": "prompt is too long: 9 tokens > 8 maximum"}}
    failures: list[str] = []
    with pytest.raises(ContextLengthExceeded):
        await post_summary(wire_named("chat"), answering(400, refusal, []), {}, {}, failures)
    assert failures == []


@pytest.mark.parametrize(
    ("data", "noted"),
    [
        ({"error": {"message": "Invalid model"}}, "upstream answered 404: Invalid model"),
        ("not an object", "upstream answered 404: no message"),
    ],
)
async def test_another_refusal_is_an_upstream_error_noted_for_the_operator(
    data: Any, noted: str
) -> None:
    failures: list[str] = []
    with pytest.raises(UpstreamError, match="summary request failed with status 404"):
        await post_summary(wire_named("chat"), answering(404, data, []), {}, {}, failures)
    assert failures == [noted]
    with pytest.raises(UpstreamError):  # without a list, nothing is noted
        await post_summary(wire_named("chat"), answering(404, data, []), {}, {})


async def test_the_reply_as_it_came_is_handed_on_once_read() -> None:
    seen: list[Any] = []
    wire = wire_named("messages")
    await post_summary(wire, answering(200, REPLY, []), {}, {}, on_reply=seen.append)
    assert seen == [REPLY]
    with pytest.raises(UpstreamError):
        await post_summary(wire, answering(500, {}, []), {}, {}, on_reply=seen.append)
    assert seen == [REPLY]
