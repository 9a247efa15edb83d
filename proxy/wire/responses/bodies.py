"""Request bodies the proxy itself writes in the Responses API, and the replies it reads.

`upstream_input` turns a rebuilt conversation into a turn's `instructions` and `input`: the
client's own system items verbatim, the summary after the client's `instructions` (or, when
it sent none, as a developer item after its own system items), never in their place.
`summary_request` and `summary_reply` carry a Chat Completions-shaped summary request over
the Responses API (`store: false`, since some providers serve nothing else) and bring the
answer back in the Chat Completions shape the summariser reads. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from proxy.session.rebuild import Outgoing
from proxy.wire.base import JSON
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import (
    X_ITEMS,
    output_to_message,
    parts_text,
    user_content,
)


def summary_item(summary: str) -> JSON:
    return {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": summary}],
    }


def upstream_input(out: Outgoing, instructions: Any) -> tuple[Any, list[Any]]:
    """The `instructions` and `input` to send for a rebuilt conversation."""
    system = messages_to_items(out.system)
    rest = messages_to_items(out.rest)
    if out.summary is None:
        return instructions, [*system, *rest]
    if isinstance(instructions, str) and instructions.strip():
        return f"{instructions}\n\n{out.summary}", [*system, *rest]
    return instructions, [*system, summary_item(out.summary), *rest]


def _content_of(message: JSON) -> Any:
    """The content `items_to_messages` gave a message with these originals."""
    originals = message[X_ITEMS]
    role = message.get("role")
    if role == "assistant":
        return output_to_message(originals).get("content")
    if len(originals) != 1 or not isinstance(originals[0], dict):
        return message.get("content")
    content = originals[0].get("content")
    if role == "user":
        return user_content(content) if isinstance(content, str | list) else content
    return parts_text(content)


def _edited(message: JSON) -> bool:
    """A message whose text the summariser shortened to fit the window."""
    if message.get("role") == "tool" or not isinstance(message.get(X_ITEMS), list):
        return False
    try:
        return bool(message.get("content") != _content_of(message))
    except ValueError:  # originals the proxy cannot read: leave them as they are
        return False


def untied(item: Any) -> Any:
    """An item without its `id`, which could tie it to a reasoning item left out."""
    if isinstance(item, dict) and "id" in item and item.get("type") not in (None, "item_reference"):
        return {k: v for k, v in item.items() if k != "id"}
    return item


def summary_request(
    chat_body: JSON, *, instructions: str | None = None, keep_reasoning: bool = True
) -> JSON:
    """A Chat Completions-shaped summary request (`model`, `messages`, `tools`, ...) as a
    Responses request. Reasoning items go along (byte for byte) when the summary is asked of
    the session's own model; another model cannot read them, so `keep_reasoning=False` leaves
    them out, and the ids that would point at them."""
    messages = [
        {k: v for k, v in m.items() if k != X_ITEMS} if _edited(m) else m
        for m in chat_body.get("messages") or []
        if isinstance(m, dict)
    ]
    items = messages_to_items(messages)
    if not keep_reasoning:
        items = [
            untied(i) for i in items if not (isinstance(i, dict) and i.get("type") == "reasoning")
        ]
    body: JSON = {"model": chat_body.get("model"), "input": items, "store": False}
    if instructions:
        body["instructions"] = instructions
    for key in ("tools", "tool_choice", "stream"):
        if key in chat_body:
            body[key] = chat_body[key]
    return body


def summary_reply(data: JSON) -> JSON:
    """A Responses reply to a summary request as the chat completion the summariser reads."""
    output = data.get("output")
    texts = [
        parts_text(item.get("content"))
        for item in (output if isinstance(output, list) else [])
        if isinstance(item, dict) and item.get("type") == "message"
    ]
    found = data.get("usage")
    usage: JSON = found if isinstance(found, dict) else {}
    message = {"role": "assistant", "content": "\n".join(t for t in texts if t)}
    return {
        "id": data.get("id"),
        "object": "chat.completion",
        "model": data.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "total_tokens": usage.get("total_tokens"),
        },
    }
