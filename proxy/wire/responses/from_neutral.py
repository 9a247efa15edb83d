"""Neutral messages -> Responses API items: the way back of `proxy.wire.responses.to_neutral`.

A neutral message made from items goes back as those very items (`x_items`), so what the
client sent goes upstream byte for byte; only what the proxy made (its summary, its extract
calls and their answers, an edited tool output) becomes new items. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.session.extract_tool import content_text
from proxy.session.tool_output import as_text, part_text
from proxy.wire.responses.to_neutral import CLIENT_ROLES, TEXT_OUTPUTS, X_ITEMS, output_content


def _function_call(call: dict[str, Any]) -> list[Any]:
    """The items of a tool call the client never sent (the proxy's own extract calls)."""
    originals = call.get(X_ITEMS)
    if isinstance(originals, list):
        return list(originals)  # the very items the model produced for it
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments if arguments is not None else {}).decode()
    # No `id`: an id would tie the call to a reasoning item this request may not carry.
    return [
        {
            "type": "function_call",
            "call_id": str(call.get("id")),
            "name": str(fn.get("name")),
            "arguments": arguments,
        }
    ]


_PARTS = frozenset({"input_text", "input_image", "input_file", "text", "output_text"})


def output_value(content: Any) -> str | list[Any]:
    """Neutral tool content as a `function_call_output`'s `output`: a string as is; a list as
    input parts in place (text, images, files); a list of other entries (a shell call's
    stdout and stderr) as their text (`proxy.session.tool_output.as_text`). Never empty."""
    if isinstance(content, str) and content:
        return content
    if not isinstance(content, list) or not content:
        return as_text(content)
    kinds = [p.get("type") if isinstance(p, dict) else None for p in content]
    if not any(kind in _PARTS or kind == "image_url" for kind in kinds):
        return as_text(content)
    out: list[Any] = []
    for part, kind in zip(content, kinds, strict=True):
        if kind in ("input_image", "input_file") and (
            part.get("image_url")
            or part.get("file_id")
            or part.get("file_data")
            or part.get("file_url")
        ):
            out.append(part)
        elif kind == "image_url":
            out.append(_input_part(part))
        else:
            out.append({"type": "input_text", "text": part_text(part)})
    return out


def _tool_items(message: dict[str, Any], originals: Any) -> list[Any]:
    content = message.get("content")
    if not isinstance(originals, list):
        # Chat-style text parts (the core's own) as one text; the client's parts as they are.
        chat_text = isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in content
        )
        output = content_text(content) if chat_text else output_value(content)
        call_id = str(message.get("tool_call_id"))
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
    if len(originals) != 1 or not isinstance(originals[0], dict):
        return list(originals)
    original = originals[0]
    kind = original.get("type")
    if content is original.get("output") or content == output_content(original):
        return [original]
    field = "result" if "output" not in original and "result" in original else "output"
    if isinstance(original.get(field), str) or kind in TEXT_OUTPUTS:
        new = content if isinstance(content, str | list) else content_text(content)
        return [{**original, field: new}]
    return [original]  # a structured output that text cannot stand in for


def _input_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    if part.get("type") == "text":
        return {"type": "input_text", "text": part.get("text")}
    if part.get("type") == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, dict) else {"url": image}
        return {"type": "input_image", "image_url": image.get("url"), **_detail(image)}
    return part


def _detail(image: dict[str, Any]) -> dict[str, Any]:
    return {"detail": image["detail"]} if "detail" in image else {"detail": "auto"}


def messages_to_items(messages: list[dict[str, Any]]) -> list[Any]:
    """Neutral messages back as `input` items: originals verbatim, the proxy's own added."""
    items: list[Any] = []
    for message in messages:
        role, originals = message.get("role"), message.get(X_ITEMS)
        if role == "tool":
            # Mostly the one original whose output the message still holds: that item as is.
            if isinstance(originals, list) and len(originals) == 1:
                original = originals[0]
                if isinstance(original, dict) and message.get("content") is original.get("output"):
                    items.append(original)
                    continue
            items.extend(_tool_items(message, originals))
        elif role == "assistant":
            known: set[Any] = set()  # the calls its originals make
            if isinstance(originals, list):
                items.extend(originals)
                for original in originals:  # (in 3.11 a loop costs less than a comprehension)
                    if isinstance(original, dict):
                        known.add(original.get("call_id"))
            elif message.get("content"):
                text = content_text(message["content"])
                items.append({"type": "message", "role": "assistant", "content": text})
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id") not in known:
                    items.extend(_function_call(call))
        elif isinstance(originals, list):
            items.extend(originals)
        elif role in CLIENT_ROLES:
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
            items.append(
                {"type": "message", "role": role, "content": [_input_part(p) for p in parts]}
            )
        else:
            raise ValueError(f"a message with role {role!r} and no original items")
    return items
