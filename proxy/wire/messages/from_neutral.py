"""Neutral messages -> Anthropic Messages requests: the way back of
`proxy.wire.messages.to_neutral`.

`from_neutral` turns neutral messages back into `system` + `messages`: verbatim where
nothing changed, with the level-1 placeholders, the proxy's hidden extract calls, and the
repairs a summary cut needs (every `tool_result` right after its `tool_use`, a user message
first). The way there (`to_neutral`) and the private keys neutral messages carry are in
`proxy.wire.messages.to_neutral`, and imported here too, where they used to live. Pure: no I/O.
The rest of a request (summary, cache breakpoints, tools, checks) is in
`proxy.wire.messages.bodies`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.conversation_message import content_to_text
from proxy.session.history import UnrecognisedHistory
from proxy.wire.messages.content import (
    as_blocks,
    from_parts,
    parts,
    retexted,
    tool_content,
    tool_use_block,
    tool_use_ids,
)
from proxy.wire.messages.to_neutral import (
    X_ENVELOPE,
    X_FIRST,
    X_GROUP,
    X_ITEMS,
    X_SYSTEM,
    run_text,
)

CONTINUED = "[The conversation before this point is summarised in the system prompt.]"

# -- neutral -> request -------------------------------------------------------------------


def from_neutral(messages: Sequence[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """(`system`, `messages`) for the upstream: originals verbatim, changes applied.

    `system` is None when there is no system message. A system message without originals
    (the core's rendering of a summary with the client's system) comes back as plain text:
    the pipeline should pass the messages after it and build `system` with `with_summary`,
    which keeps the client's blocks and their cache marks.
    """
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # the proxy's own extract answers, as tool_result
    i = 0
    while i < len(messages):
        msg = messages[i]
        role = msg.get("role")
        group = msg.get(X_GROUP)
        if role == "system":
            system.append(msg)
        elif group is not None and role in ("tool", "user"):
            j = i + 1
            while j < len(messages):
                nxt = messages[j]
                if not (nxt.get(X_GROUP) == group and nxt.get("role") in ("tool", "user")):
                    break
                j += 1
            out.append(_group_to_wire(messages[i:j], pending))
            pending = []
            i = j
            continue
        elif role == "tool":
            pending.append(_new_result(msg))
        elif role == "assistant":
            _flush(out, pending)
            out.extend(_assistant_to_wire(msg))
        elif role == "user":
            original = _original(msg)
            if isinstance(original, dict) and original.get("role") == "system":
                _flush(out, pending)
                out.append(_edited(msg, original))
            else:
                out.append(_user_to_wire(msg, original, pending))
            pending = []
        else:
            raise UnrecognisedHistory(f"neutral message {i} has no known role")
        i += 1
    _flush(out, pending)
    first = next((m for m in messages if m.get("role") != "system"), None)
    _repair(out, whole=first is not None and bool(first.get(X_FIRST)))
    return _system_from(system), out


def _original(msg: dict[str, Any]) -> Any:
    items = msg.get(X_ITEMS)
    return items[0] if isinstance(items, list) and len(items) == 1 else None


def _flush(out: list[dict[str, Any]], pending: list[dict[str, Any]]) -> None:
    if pending:
        out.append({"role": "user", "content": list(pending)})
        pending.clear()


def _system_from(messages: list[dict[str, Any]]) -> Any:
    if not messages:
        return None
    if not all(m.get(X_SYSTEM) and isinstance(m.get(X_ITEMS), list) for m in messages):
        return "\n\n".join(t for t in (content_to_text(m.get("content")) for m in messages) if t)
    if len(messages) == 1:
        items = messages[0][X_ITEMS]
        return items[0] if len(items) == 1 and isinstance(items[0], str) else list(items)
    return [b for m in messages for b in as_blocks(_system_items(m[X_ITEMS]))]


def _system_items(items: list[Any]) -> Any:
    return items[0] if len(items) == 1 and isinstance(items[0], str) else items


def _result_to_wire(msg: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = msg[X_ITEMS][0]
    content = msg.get("content")
    if content == tool_content(block):
        return block
    return {**block, "content": from_parts(content)}  # the level-1 placeholder


def _new_result(msg: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": str(msg.get("tool_call_id")),
        "content": from_parts(msg.get("content")),
    }


def _group_to_wire(
    group: Sequence[dict[str, Any]], pending: list[dict[str, Any]]
) -> dict[str, Any]:
    """One user message again from its tool results and the rest of its blocks."""
    results = []
    rest_msg = None
    for m in group:
        if m["role"] == "tool":
            results.append(_result_to_wire(m))
        elif rest_msg is None and m["role"] == "user":
            rest_msg = m
    rest: list[Any] = []
    envelope: dict[str, Any]
    if rest_msg is not None:
        envelope = rest_msg[X_ITEMS][0]
        content = envelope.get("content")
        blocks = content if isinstance(content, list) else []
        originals = [b for b in blocks if b.get("type") == "tool_result"]
        rest = [b for b in blocks if b.get("type") != "tool_result"]
        if rest_msg.get("content") != parts(rest):
            rest = as_blocks(from_parts(rest_msg.get("content")))
        elif not pending and results == originals:
            return envelope  # nothing changed: the client's own message
    else:
        envelope = group[0][X_ENVELOPE]
    wire = dict(envelope.items())  # its keys in their order; content where it was, else last
    wire["content"] = [*pending, *results, *rest]
    return wire


def _edited(msg: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    """The original, or a copy with the content the core wrote (e.g. a shortened message)."""
    content = msg.get("content")
    if content == parts(original.get("content")):
        return original
    return {**original, "content": from_parts(content)}


def _user_to_wire(
    msg: dict[str, Any], original: Any, pending: list[dict[str, Any]]
) -> dict[str, Any]:
    if isinstance(original, dict):
        wire = _edited(msg, original)
        if pending:
            wire = {**wire, "content": [*pending, *as_blocks(wire.get("content"))]}
        return wire
    content = from_parts(msg.get("content"))
    if pending:
        content = [*pending, *as_blocks(content)]
    return {"role": "user", "content": content}


def _assistant_to_wire(msg: dict[str, Any]) -> list[dict[str, Any]]:
    items = msg.get(X_ITEMS)
    if isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict):
        # The common case, one original neither retexted nor joined by a hidden call: it
        # goes back as it came, found in one walk of its blocks.
        text, known = _text_and_ids(items[0])
        if msg.get("content") == text and not any(
            isinstance(c, dict) and c.get("id") not in known for c in msg.get("tool_calls") or []
        ):
            return [items[0]]
    originals = [o for o in items if isinstance(o, dict)] if isinstance(items, list) else []
    calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    if not originals:
        blocks = as_blocks(content_to_text(msg.get("content")))
        blocks += [tool_use_block(c) for c in calls]
        return [{"role": "assistant", "content": blocks}] if blocks else []
    known = {i for o in originals for i in tool_use_ids(o)}
    extra = [tool_use_block(c) for c in calls if c.get("id") not in known]
    text = msg.get("content")
    if text != run_text(originals):  # the core rewrote it (a summary request shortening it)
        blocks = [b for o in originals for b in as_blocks(o.get("content"))]
        originals = [{**originals[0], "content": retexted(blocks, text)}]
    if extra:
        # The proxy's hidden extract calls join the client's message after its own blocks.
        last = originals[-1]
        originals = [
            *originals[:-1],
            {**last, "content": [*as_blocks(last.get("content")), *extra]},
        ]
    return originals


def _text_and_ids(message: dict[str, Any]) -> tuple[str | None, set[str]]:
    """`run_text([message])` and `tool_use_ids(message)`, in one walk of its blocks."""
    content = message.get("content")
    if not isinstance(content, list):
        return run_text([message]), set()
    texts: list[str] = []
    ids: set[str] = set()
    assistant = message.get("role") == "assistant"
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text = block.get("text")
            if isinstance(text, str):
                texts.append(text)
        elif kind == "tool_use" and assistant:
            call_id = block.get("id")
            if isinstance(call_id, str):
                ids.add(call_id)
    return "\n".join(texts) or None, ids


def _repair(out: list[dict[str, Any]], *, whole: bool) -> None:
    """Make a history that lost its start (a summary cut) one Anthropic accepts."""
    if not whole and out and out[0].get("role") != "user":
        out.insert(0, {"role": "user", "content": CONTINUED})
    run: set[str] = set()  # tool_use ids of the assistant messages just before
    before: Any = None  # the role of the message before
    for k, msg in enumerate(out):
        role = msg.get("role")
        after_assistant = before == "assistant"
        before = role
        if role == "assistant":
            run = (run if after_assistant else set()) | tool_use_ids(msg)
        content = msg.get("content")
        if role != "user" or not isinstance(content, list):
            continue
        calls = run if after_assistant else set()
        if not _has_orphan(content, calls):
            continue
        orphan = [
            isinstance(b, dict)
            and b.get("type") == "tool_result"
            and b.get("tool_use_id") not in calls
            for b in content
        ]
        if not any(orphan):
            continue
        # Valid results stay first, as Anthropic requires; orphans become plain text.
        first = [
            b
            for b, o in zip(content, orphan, strict=True)
            if not o and isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        later = [
            _orphan_text(b) if o else b
            for b, o in zip(content, orphan, strict=True)
            if o or not (isinstance(b, dict) and b.get("type") == "tool_result")
        ]
        out[k] = {**msg, "content": [*first, *later]}


def _has_orphan(content: list[Any], calls: set[str]) -> bool:
    for block in content:
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id") not in calls
        ):
            return True
    return False


def _orphan_text(block: dict[str, Any]) -> dict[str, Any]:
    text = content_to_text(tool_content(block))
    return {"type": "text", "text": f"[Result of tool call {block.get('tool_use_id')}]\n{text}"}
