"""A whole Messages answer to a stream request, as the events Anthropic would have streamed.

Some gateways ignore `stream` and answer with the Message object. `whole_events` turns that
body into `message_start`, each content block's `content_block_start` (empty of what its
deltas carry), its deltas (`text_delta`, `thinking_delta` + `signature_delta`,
`input_json_delta`, each whole) and `content_block_stop`, then `message_delta` (stop reason,
usage) and `message_stop`. The relay then handles them as any stream, so hidden extract
blocks and index renumbering follow its rules. A body that is not a message becomes one
`error` event: the upstream's own error when it is one. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

Event = tuple[str, dict[str, Any]]

NOT_A_MESSAGE = (
    "The upstream API answered a stream request with a body that is neither an event stream "
    "nor a message."
)


def whole_events(raw: bytes) -> list[Event]:
    """The named events for one upstream body."""
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if _is_message(data):
        return message_events(data)
    error = data.get("error") if isinstance(data, dict) else None
    if not (isinstance(error, dict) and isinstance(error.get("type"), str)):
        error = {"type": "api_error", "message": NOT_A_MESSAGE}
    return [("error", {"type": "error", "error": error})]


def _is_message(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("type", "message") != "message":
        return False
    content = data.get("content")
    return isinstance(content, list) and all(isinstance(b, dict) for b in content)


def message_events(message: dict[str, Any]) -> list[Event]:
    """A message's stream, from `message_start` to `message_stop`."""
    opening = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[Event] = [("message_start", {"type": "message_start", "message": opening})]
    for index, block in enumerate(message["content"]):
        start, deltas = block_parts(block)
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {key: message.get(key) for key in ("stop_reason", "stop_sequence")}
    closing: dict[str, Any] = {"type": "message_delta", "delta": delta}
    usage = message.get("usage")
    if isinstance(usage, dict):
        closing["usage"] = usage  # cumulative, as message_delta's is
    events.append(("message_delta", closing))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def block_parts(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A block's `content_block_start` block and the deltas that complete it."""
    kind = block.get("type")
    text, thinking, signature = block.get("text"), block.get("thinking"), block.get("signature")
    tool_input = block.get("input")
    if kind == "text" and isinstance(text, str):
        return {**block, "text": ""}, [{"type": "text_delta", "text": text}] if text else []
    if kind == "thinking" and isinstance(thinking, str):
        start = {**block, "thinking": ""}
        deltas = [{"type": "thinking_delta", "thinking": thinking}] if thinking else []
        if isinstance(signature, str):
            start["signature"] = ""
            if signature:
                deltas.append({"type": "signature_delta", "signature": signature})
        return start, deltas
    if isinstance(kind, str) and kind.endswith("tool_use") and isinstance(tool_input, dict):
        # tool_use, server_tool_use, mcp_tool_use: their input arrives as JSON text.
        partial = orjson.dumps(tool_input).decode() if tool_input else ""
        deltas = [{"type": "input_json_delta", "partial_json": partial}] if partial else []
        return {**block, "input": {}}, deltas
    return block, []  # redacted_thinking and the rest arrive whole
