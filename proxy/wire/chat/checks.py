"""Shape checks on what the upstream answers a chat request: a completion or a stream chunk.

The compacting path reads the upstream's reply (to hide the proxy's own tool calls, to sum
and record usage), so a reply of the wrong shape must not reach code that assumes the right
one. Only the parts the proxy reads are checked, and only their types: `null` stays allowed
wherever a real server may send it, and every field the proxy does not read passes as it
came. A reply that fails is an `UpstreamInvalidResponse` (502 `upstream_invalid_response`;
mid-stream, a final `data: {"error": ...}` event). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.errors import UpstreamInvalidResponse


def _list_of_objects(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(v, dict) for v in value))


def _tool_calls_problem(calls: Any) -> str | None:
    if not _list_of_objects(calls):
        return "tool_calls is not a list of objects"
    for call in calls or ():
        if not isinstance(call.get("function"), dict | None):
            return "a tool call's function is not an object"
    return None


def completion_problem(data: Any) -> str | None:
    """What is wrong with a `chat.completion` object the proxy is about to read, or None."""
    if not isinstance(data, dict):
        return "the body is not a JSON object"
    if not isinstance(data.get("usage"), dict | None):
        return "usage is not an object"
    choices = data.get("choices")
    if not _list_of_objects(choices):
        return "choices is not a list of objects"
    for choice in choices or ():
        message = choice.get("message")
        if not isinstance(message, dict | None):
            return "a choice's message is not an object"
        problem = _tool_calls_problem((message or {}).get("tool_calls"))
        if problem:
            return problem
    return None


def chunk_problem(chunk: dict[str, Any]) -> str | None:
    """What is wrong with a `chat.completion.chunk` the relay is about to read, or None.

    A `usage` of the wrong type is not a problem here: the relay ignores it.
    """
    choices = chunk.get("choices")
    if not _list_of_objects(choices):
        return "choices is not a list of objects"
    for choice in choices or ():
        delta = choice.get("delta")
        if not isinstance(delta, dict | None):
            return "a choice's delta is not an object"
        problem = _tool_calls_problem((delta or {}).get("tool_calls"))
        if problem:
            return problem
    return None


def invalid(problem: str) -> UpstreamInvalidResponse:
    return UpstreamInvalidResponse(
        f"The upstream API sent a chat completion the proxy could not read: {problem}."
    )


def checked_completion(data: Any) -> dict[str, Any]:
    """A parsed 200 reply, when it has a completion's shape; else UpstreamInvalidResponse."""
    problem = completion_problem(data)
    if problem is not None:
        raise invalid(problem)
    assert isinstance(data, dict)
    return data


def check_completion(raw: bytes) -> dict[str, Any] | None:
    """The completion in a 200 reply; None when the body is not JSON at all (the caller
    relays it as it came). Raises UpstreamInvalidResponse for JSON of the wrong shape."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return checked_completion(data)


def check_chunk(chunk: dict[str, Any]) -> None:
    """Raise UpstreamInvalidResponse for a stream chunk the relay cannot read."""
    problem = chunk_problem(chunk)
    if problem is not None:
        raise invalid(problem.replace("choices", "a stream chunk's choices", 1))


__all__ = [
    "check_chunk",
    "check_completion",
    "checked_completion",
    "chunk_problem",
    "completion_problem",
]
