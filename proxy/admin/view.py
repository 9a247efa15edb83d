"""How the admin API shows a conversation of any wire: readable text and items, no blobs.

Neutral messages carry their wire originals under `x_items` (Responses items, Anthropic
blocks). The detail view shows each message's text, and for a model turn its items one by
one in a small fixed vocabulary the viewer renders: `text`, `reasoning` (Responses; the
encrypted part only counted), `thinking` (Anthropic; the signature only noted), `call`,
`result` and `other`. Opaque or binary payloads (encrypted reasoning, signatures, base64
images and documents) never reach the view: they are named and counted.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.content_text import TextForm, text_of
from proxy.conversation_message import TRUNCATE_AT

X_ITEMS = "x_items"
BLOB_KEYS = frozenset({"encrypted_content", "signature", "data", "file_data", "image_url"})
SYSTEM_ROLES = frozenset({"system", "developer"})
# Items of a model turn that answer or report a call rather than make one.
_RESULT_TYPES = ("_output", "_result")
_PART_LABELS = {
    "image_url": "[image]",
    "input_image": "[image]",
    "image": "[image]",
    "document": "[document]",
    "input_file": "[file]",
    "file": "[file]",
    "input_audio": "[audio]",
}


def cut(text: str, truncate: bool) -> str:
    return text[:TRUNCATE_AT] + "..." if truncate and len(text) > TRUNCATE_AT else text


def without_blobs(value: Any) -> Any:
    """A copy with opaque payloads replaced by their size (for `other` items)."""
    if isinstance(value, dict):
        return {
            k: f"<{len(v)} chars>" if k in BLOB_KEYS and isinstance(v, str) else without_blobs(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [without_blobs(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(without_blobs(value), ensure_ascii=False, default=str)


def _viewer_part(part: Any) -> str:
    """A part with no text: its refusal, a label for a binary part, a tool result's text, else
    its JSON."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("refusal"), str):
        return str(part["refusal"])
    kind = part.get("type") if isinstance(part, dict) else None
    if isinstance(part, dict) and kind in _PART_LABELS:
        name = part.get("filename") or part.get("title")
        label = _PART_LABELS[str(kind)]
        return f"{label[:-1]}: {name}]" if isinstance(name, str) else label
    if isinstance(part, dict) and kind == "tool_result":
        return content_text(part.get("content"))
    return _json(part)


# Text and refusal parts, string parts as they are, binary parts as labels (`[image]`,
# `[file: a.pdf]`), a tool result's content as its text, anything else as JSON without blobs.
VIEWER = TextForm(part=_viewer_part, whole=_json)


def part_text(part: Any) -> str:
    """One content part or block as display text: its text, or a label for binary parts."""
    return text_of([part], VIEWER)


def content_text(content: Any, truncate: bool = False) -> str:
    """A message's content as display text (`VIEWER`)."""
    return cut(text_of(content, VIEWER), truncate)


def _summary_text(item: dict[str, Any]) -> str:
    parts = item.get("summary")
    return text_of(parts, VIEWER) if isinstance(parts, list) else ""


def _arguments(item: dict[str, Any]) -> str:
    for key in ("arguments", "input", "code", "action", "query"):
        value = item.get(key)
        if isinstance(value, str):
            return value
        if value is not None:
            return _json(value)
    return ""


def _item(item: Any, truncate: bool) -> dict[str, Any]:
    """One Responses item or Anthropic block as a display item."""
    if not isinstance(item, dict):
        return {"kind": "text", "text": cut(part_text(item), truncate)}
    kind = str(item.get("type") or ("message" if "role" in item else "item"))
    if kind in ("message", "text", "output_text"):
        text = item.get("text") if kind != "message" else content_text(item.get("content"))
        return {"kind": "text", "type": kind, "text": cut(str(text or ""), truncate)}
    if kind == "reasoning":
        encrypted = item.get("encrypted_content")
        return {
            "kind": "reasoning",
            "type": kind,
            "encrypted": isinstance(encrypted, str),
            "encrypted_chars": len(encrypted) if isinstance(encrypted, str) else 0,
            "text": cut(_summary_text(item) or content_text(item.get("content")), truncate),
        }
    if kind in ("thinking", "redacted_thinking"):
        text = item.get("thinking") if kind == "thinking" else ""
        return {
            "kind": "thinking",
            "type": kind,
            "redacted": kind == "redacted_thinking",
            "signed": isinstance(item.get("signature"), str),
            "text": cut(str(text or ""), truncate),
        }
    if kind.endswith(_RESULT_TYPES):
        output = item["output"] if "output" in item else item.get("content", item.get("result"))
        text = output if isinstance(output, str) else content_text(output)
        return {
            "kind": "result",
            "type": kind,
            "call_id": item.get("call_id") or item.get("tool_use_id"),
            "is_error": bool(item.get("is_error")),
            "text": cut(text, truncate),
        }
    if kind.endswith("_call") or kind.endswith("tool_use"):
        return {
            "kind": "call",
            "type": kind,
            "name": item.get("name") or kind,
            "call_id": item.get("call_id") or item.get("id"),
            "arguments": cut(_arguments(item), truncate),
            "status": item.get("status"),
        }
    return {"kind": "other", "type": kind, "text": cut(_json(item), truncate)}


def _originals(x_items: list[Any]) -> list[Any]:
    """The items of a model turn: Responses items as they are, Anthropic messages' blocks."""
    out: list[Any] = []
    for original in x_items:
        if (
            isinstance(original, dict)
            and original.get("role") == "assistant"
            and ("type" not in original)
        ):
            content = original.get("content")
            if isinstance(content, list):
                out.extend(content)
            elif isinstance(content, str) and content:
                out.append({"type": "text", "text": content})
        else:
            out.append(original)
    return out


def message_items(raw: dict[str, Any], truncate: bool) -> list[dict[str, Any]] | None:
    """An assistant message's items for display; None for other messages or without originals.

    Calls in `tool_calls` but not among the originals are the proxy's own extract calls
    (hidden from the client): they are shown as calls marked `hidden`.
    """
    originals = raw.get(X_ITEMS)
    if raw.get("role") != "assistant" or not isinstance(originals, list):
        return None
    items = [_item(o, truncate) for o in _originals(originals)]
    known = {i.get("call_id") for i in items if i["kind"] == "call"}
    for call in raw.get("tool_calls") or []:
        if not isinstance(call, dict) or call.get("id") in known:
            continue
        found = call.get("function")
        fn: dict[str, Any] = found if isinstance(found, dict) else {}
        items.append(
            {
                "kind": "call",
                "type": "function",
                "name": fn.get("name"),
                "call_id": call.get("id"),
                "arguments": cut(str(fn.get("arguments") or ""), truncate),
                "hidden": True,
            }
        )
    return items


def wire_type(raw: dict[str, Any]) -> str | None:
    """The wire type of a non-assistant message's original (e.g. `function_call_output`)."""
    originals = raw.get(X_ITEMS)
    first = originals[0] if isinstance(originals, list) and originals else None
    if raw.get("role") == "assistant" or not isinstance(first, dict):
        return None
    kind = first.get("type")
    return str(kind) if isinstance(kind, str) else None


def is_mid_system(raw: dict[str, Any]) -> bool:
    """A system or developer message among the conversation's messages: the leading ones
    are the kept sections, so this is one in the middle (Claude Code's reminders, a
    Responses developer item after the first turn)."""
    if raw.get("role") in SYSTEM_ROLES:
        return True
    originals = raw.get(X_ITEMS)
    first = originals[0] if isinstance(originals, list) and originals else None
    return isinstance(first, dict) and first.get("role") in SYSTEM_ROLES


__all__ = ["content_text", "is_mid_system", "message_items", "wire_type", "without_blobs"]
