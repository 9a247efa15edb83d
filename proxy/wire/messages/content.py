"""Anthropic content blocks <-> the chat content parts the core reads, both ways.

Text blocks become text parts and images `image_url` parts (so the core's size estimate
counts "[image]", not kilobytes of base64); every other block is kept as it is. Also the
small readings both directions of `proxy.wire.messages.from_neutral` share: an assistant message's
text, its `tool_use` ids, a `tool_result`'s content, a chat tool call as a `tool_use` block.
Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from proxy.conversation_message import content_to_text


def assistant_text(content: Any) -> str | None:
    """An assistant message's visible text (its text blocks joined), None without any."""
    if isinstance(content, str):
        return content or None
    texts = [
        b["text"]
        for b in (content if isinstance(content, list) else ())
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts) or None


def tool_use_ids(message: Any) -> set[str]:
    """Ids of the `tool_use` blocks of an assistant message (empty for anything else)."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return set()
    content = message.get("content")
    return {
        b["id"]
        for b in (content if isinstance(content, list) else ())
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    }


def tool_content(block: dict[str, Any]) -> Any:
    """A `tool_result` block's content as the neutral tool message's content."""
    content = block.get("content")
    if content is None:
        return ""
    return parts(content)


def parts(content: Any) -> Any:
    """Chat content for wire content: text stays text, images become `image_url` parts."""
    if not isinstance(content, list):
        return content
    return [part(b) for b in content]


def part(block: Any) -> Any:
    """One block as a chat content part."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    source = block.get("source") if kind == "image" else None
    # Base64 and URL images only: another source (an uploaded file's id) has no URL to stand
    # for it, so that block is kept as it is, and comes back as it was.
    if isinstance(source, dict) and source.get("type") in ("base64", "url"):
        # Counted as "[image]", not as kilobytes of base64, by the core's size estimate.
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        else:
            url = str(source.get("url") or "")
        return {"type": "image_url", "image_url": {"url": url}}
    return block


def json_text(value: Any) -> str:
    """A `tool_use` input as tool-call arguments (compact JSON)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def as_blocks(content: Any) -> list[Any]:
    """Wire content as a list of blocks (a string becomes one text block, "" none)."""
    if isinstance(content, list):
        return list(content)
    if isinstance(content, str) and content:
        return [{"type": "text", "text": content}]
    return []


def from_parts(content: Any) -> Any:
    """Wire content for chat content the core wrote (a string, or parts)."""
    if not isinstance(content, list):
        return "" if content is None else content
    blocks = []
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "image_url" and isinstance(item.get("image_url"), dict):
            url = str(item["image_url"].get("url") or "")
            head, _, data = url.partition(";base64,")
            if head.startswith("data:") and data:
                source = {"type": "base64", "media_type": head[5:], "data": data}
            else:
                source = {"type": "url", "url": url}
            blocks.append({"type": "image", "source": source})
        elif isinstance(item, str):
            blocks.append({"type": "text", "text": item})
        else:
            blocks.append(item)
    return blocks


def retexted(content: Any, text: Any) -> list[Any]:
    """Blocks with their text replaced by `text` (at the first text block's place, else after
    the thinking); every other block, thinking included, unchanged."""
    blocks = as_blocks(content)
    kinds = [b.get("type") if isinstance(b, dict) else None for b in blocks]
    thinking = ("thinking", "redacted_thinking")
    lead = next((i for i, kind in enumerate(kinds) if kind not in thinking), len(kinds))
    at = kinds.index("text") if "text" in kinds else lead
    new = as_blocks(content_to_text(text))
    kept = [b for b, kind in zip(blocks, kinds, strict=True) if kind != "text"]
    before = sum(1 for kind in kinds[:at] if kind != "text")
    return [*kept[:before], *new, *kept[before:]]


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """A chat tool call (the proxy's hidden extract call) as a `tool_use` block."""
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    arguments = function.get("arguments")
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except orjson.JSONDecodeError:
        value = {}
    return {
        "type": "tool_use",
        "id": str(call.get("id")),
        "name": str(function.get("name") or ""),
        "input": value if isinstance(value, dict) else {},
    }
