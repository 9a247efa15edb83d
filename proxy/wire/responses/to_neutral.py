"""Responses API items <-> neutral messages.

A stateless Responses request carries the whole history as `input` items. `items_to_messages` groups
them into the Chat Completions-shaped messages the core works on: leading developer or system items
become system messages, each user item a user message, each run of model items (reasoning, assistant
text, calls of any kind, unknown items) one assistant message with a tool call per item that has a
`call_id`, and each output a tool message. Every message keeps the very items it came from under
`x_items`; `messages_to_items` (`proxy.wire.responses.from_neutral`) emits those verbatim, so a
history the core left alone comes back byte for byte (reasoning `encrypted_content` included). The
extract tool in the Responses shape is `proxy.wire.responses.tool`. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.content_text import TEXT_AND_REFUSALS, text_of
from proxy.session.history import X_PROVIDER_COMPACTION, UnrecognisedHistory
from proxy.wire.provider_compaction import COMPACTION

X_ITEMS = "x_items"

# Output items that always answer a call (a missing or unknown call makes the history one the
# proxy cannot reason about). Other `*_output` items answer a call when they name one.
KNOWN_OUTPUTS = frozenset(
    {"function_call_output", "custom_tool_call_output", "computer_call_output"}
    | {"local_shell_call_output"}
)
# Outputs whose `output` may be text whatever it held: a placeholder may replace it.
TEXT_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Outputs whose structured output (a screenshot) counts as an image; never replaced, since
# text cannot stand in for it.
FIXED_OUTPUTS = frozenset({"computer_call_output"})
CLIENT_ROLES = frozenset({"user", "system", "developer"})
SYSTEM_ROLES = frozenset({"system", "developer"})

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _fail(i: int, why: str) -> UnrecognisedHistory:
    return UnrecognisedHistory(f"input item {i}: {why}")


def _item_type(item: dict[str, Any], i: int) -> str:
    kind = item.get("type")
    if kind is None:
        if "role" in item:
            return "message"  # the easy form: {"role": ..., "content": ...}
        if "id" in item:
            return "item_reference"  # its `type` is optional
        raise _fail(i, "an item without a type")
    if not isinstance(kind, str):
        raise _fail(i, "the item's type is not a string")
    return kind


def _output_link(item: dict[str, Any], kind: str, i: int) -> str | None:
    """The call_id an output item answers; None when the item is no tool output."""
    if kind in KNOWN_OUTPUTS:
        link = item.get("call_id")
        if link is None and kind == "local_shell_call_output":
            link = item.get("id")  # the older shape names the call under `id`
        if not isinstance(link, str):
            raise _fail(i, f"a {kind} without a call_id")
        return link
    link = item.get("call_id")
    if kind.endswith("_output") and isinstance(link, str):
        return link
    return None


def parts_text(content: Any) -> str:
    """The text of a message's content: a string as is, text and refusal parts joined
    (`TEXT_AND_REFUSALS`: other parts left out)."""
    return text_of(content, TEXT_AND_REFUSALS)


def user_content(content: str | list[Any]) -> str | list[Any]:
    """A user item's content as chat content: text and image parts in the chat shape."""
    if isinstance(content, str):
        return content
    parts: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            image = {"url": part.get("image_url") or part.get("file_id")}
            if "detail" in part:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append(part)  # files and unknown parts: counted as their JSON
    return parts


def output_content(item: dict[str, Any]) -> Any:
    """The content of the tool message an output item becomes."""
    if item.get("type") in FIXED_OUTPUTS:
        shot = item.get("output")
        url = shot.get("image_url") if isinstance(shot, dict) else None
        file_id = shot.get("file_id") if isinstance(shot, dict) else None
        if not url and isinstance(file_id, str):  # an uploaded screenshot: named by its file
            return [{"type": "input_image", "file_id": file_id}]
        return [{"type": "input_image", "image_url": url}]
    value = item["output"] if "output" in item else item.get("result")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return list(value)  # text, image and file parts, kept as parts
    if value is None:
        return ""
    return orjson.dumps(value).decode()


def _arguments(item: dict[str, Any]) -> str:
    for key in ("arguments", "input", "code"):
        if isinstance(item.get(key), str):
            return str(item[key])
    for key in ("action", "actions", "arguments", "operation"):
        if key in item:
            return orjson.dumps(item[key]).decode()
    return ""


def _add(
    item: dict[str, Any],
    kind: str,
    i: int,
    texts: list[str],
    reasoning: list[str],
    calls: list[dict[str, Any]],
    call_ids: set[str],
) -> None:
    """A model item's share of its assistant message: its text, its reasoning, its call."""
    if kind == "message":
        content = item.get("content")
        if not isinstance(content, str | list):
            raise _fail(i, "an assistant message without text or parts")
        texts.append(parts_text(content))
    elif kind == "reasoning":
        # The summary (and, from open models, the reasoning text) is what a model reads
        # back; the encrypted content is opaque and never counted nor touched.
        found = (parts_text(item.get("summary")), parts_text(item.get("content")))
        reasoning.extend(text for text in found if text)
    call_id = item.get("call_id")
    if call_id is None:
        return
    if not isinstance(call_id, str):
        raise _fail(i, "a call_id that is not a string")
    name = item.get("name")
    function = {"name": name if isinstance(name, str) else kind, "arguments": _arguments(item)}
    calls.append({"id": call_id, "type": "function", "function": function})
    call_ids.add(call_id)


# An assistant message being filled from a run of model items: the message (its items under
# `x_items`), its texts, its reasoning texts and its tool calls.
_Pending = tuple[dict[str, Any], list[str], list[str], list[dict[str, Any]]]


def _complete(pending: list[_Pending]) -> None:
    """The assistant messages, filled in once their runs have ended."""
    for message, texts, reasoning, calls in pending:
        if texts:
            message["content"] = "\n".join(texts)
        if reasoning:
            message["reasoning_content"] = "\n".join(reasoning)
        if calls:
            message["tool_calls"] = calls


def _client_message(item: dict[str, Any], i: int, leading: bool) -> dict[str, Any]:
    role, content = item.get("role"), item.get("content")
    if role not in CLIENT_ROLES:
        raise _fail(i, f"a message with the unknown role {role!r}")
    if not isinstance(content, str | list):
        raise _fail(i, "a message whose content is neither text nor a list of parts")
    if role == "user":
        return {"role": "user", "content": user_content(content), X_ITEMS: [item]}
    return {"role": "system" if leading else role, "content": parts_text(content), X_ITEMS: [item]}


@dataclass(frozen=True)
class Converted:
    """A request's neutral messages, and where converting went on from after its last item
    (`convert(..., before=...)`): possible only when no assistant message was left open
    (the last item was an output or a client message). Never changed once made."""

    neutral: list[dict[str, Any]]
    count: int  # the items converted
    closed: bool  # no assistant message was being filled at the end
    open_calls: frozenset[str]
    leading: bool


def items_to_messages(items: Any) -> list[dict[str, Any]]:
    """A request's `input` as neutral messages; UnrecognisedHistory when it cannot be.

    One pass, per request, so kept lean: the items are referenced, never copied, and the
    kinds an agent's history is made of (reasoning, function calls, their text outputs) take
    a short path when well formed. Any other item, or any doubt, takes the general path,
    which decides (and words) every refusal."""
    if isinstance(items, str):
        return [{"role": "user", "content": items, X_ITEMS: [{"role": "user", "content": items}]}]
    return convert(items).neutral


def convert(items: Any, before: Converted | None = None) -> Converted:
    """`items_to_messages` of a list, as a `Converted`; with `before`, the conversion of the
    first `before.count` of these items (an earlier request's), only the items after them are
    converted: what converting them all would give."""
    if not isinstance(items, list):
        raise UnrecognisedHistory("input is neither text nor a list of items")
    pending: list[_Pending] = []
    # The assistant message being filled (None when none is), and its parts.
    originals: list[dict[str, Any]] | None = None
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    if before is None or not before.closed or not 0 < before.count <= len(items):
        messages: list[dict[str, Any]] = []
        start = 0
        open_calls: set[str] = set()  # calls the next outputs may answer
        leading = True  # nothing but system and developer items yet (an output follows a call)
    else:
        messages, start = list(before.neutral), before.count
        open_calls, leading = set(before.open_calls), before.leading
    append = messages.append
    for i in range(start, len(items)):
        item = items[i]
        if not isinstance(item, dict):
            raise _fail(i, "an item that is not an object")
        kind = item.get("type")
        if kind == "function_call_output":
            link, output = item.get("call_id"), item.get("output")
            if isinstance(output, str) and isinstance(link, str) and link in open_calls:
                append({"role": "tool", "tool_call_id": link, "content": output, X_ITEMS: [item]})
                originals = None
                continue
        if kind != "reasoning" and kind != "function_call":
            kind = kind if kind == "message" else _item_type(item, i)
            if kind == "message" and item.get("role") != "assistant":
                leading = leading and item.get("role") in SYSTEM_ROLES
                append(_client_message(item, i, leading))
                originals, open_calls = None, set()
                continue
            link = None if kind == "message" else _output_link(item, kind, i)
            if link is not None:
                if link not in open_calls:
                    raise _fail(i, f"an output for call {link!r}, which no call just before made")
                content = output_content(item)
                append({"role": "tool", "tool_call_id": link, "content": content, X_ITEMS: [item]})
                originals = None
                continue
        # A model item: it joins the assistant message being filled, or starts one.
        leading = False
        if originals is None:
            originals, texts, reasoning, calls = [], [], [], []
            open_calls = set()
            message = {"role": "assistant", "content": None, X_ITEMS: originals}
            append(message)
            pending.append((message, texts, reasoning, calls))
        originals.append(item)
        if kind == COMPACTION:  # the provider's own: the session begins again here
            pending[-1][0][X_PROVIDER_COMPACTION] = True
        if kind == "reasoning" and item.get("call_id") is None:  # what `_add` reads of it
            _read_reasoning(item, reasoning)
            continue
        if kind == "function_call":
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
            if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
                function = {"name": name, "arguments": arguments}
                calls.append({"id": call_id, "type": "function", "function": function})
                open_calls.add(call_id)
                continue
        _add(item, kind, i, texts, reasoning, calls, open_calls)
    _complete(pending)
    return Converted(messages, len(items), originals is None, frozenset(open_calls), leading)


def _read_reasoning(item: dict[str, Any], reasoning: list[str]) -> None:
    """A reasoning item's summary and content text, added to `reasoning`."""
    summary = item.get("summary")
    if summary:  # the usual one summary part read in place, as `parts_text` would
        part = summary[0] if isinstance(summary, list) and len(summary) == 1 else None
        text = part.get("text") if isinstance(part, dict) else None
        if not isinstance(text, str):
            text = parts_text(summary)
        if text:
            reasoning.append(text)
    content = item.get("content")
    if content and (text := parts_text(content)):
        reasoning.append(text)


def output_to_message(output: Any) -> dict[str, Any]:
    """A response's `output` items as one assistant message (calls, text, reasoning)."""
    if not isinstance(output, list):
        raise UnrecognisedHistory("the response's output is not a list")
    originals: list[dict[str, Any]] = []
    message = {"role": "assistant", "content": None, X_ITEMS: originals}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for i, item in enumerate(output):
        if not isinstance(item, dict):
            raise _fail(i, "an output item that is not an object")
        originals.append(item)
        _add(item, _item_type(item, i), i, texts, reasoning, calls, call_ids)
    _complete([(message, texts, reasoning, calls)])
    return message
