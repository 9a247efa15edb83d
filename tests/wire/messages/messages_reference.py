"""The Messages wire's slow, plain reference versions, kept as oracles for the fast ones.

`to_neutral` and `from_neutral` here are `proxy.wire.messages.from_neutral`' as they were before
their fast paths (the one-pass `to_neutral` of `proxy.wire.messages.to_neutral`; the shortcuts
of `from_neutral` for what comes back unchanged): `test_messages_fast` holds the fast ones
to them, output, sharing and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.conversation_message import content_to_text
from proxy.session.history import UnrecognisedHistory
from proxy.wire.messages.content import (
    as_blocks,
    assistant_text,
    from_parts,
    json_text,
    parts,
    retexted,
    tool_content,
    tool_use_block,
    tool_use_ids,
)
from proxy.wire.messages.from_neutral import CONTINUED
from proxy.wire.messages.to_neutral import X_ENVELOPE, X_FIRST, X_GROUP, X_ITEMS, X_SYSTEM, run_text


def to_neutral(system: Any, messages: Any) -> list[dict[str, Any]]:
    """Neutral messages for a Messages request; UnrecognisedHistory if it is not one."""
    if not isinstance(messages, list):
        raise UnrecognisedHistory("messages is not a list")
    out = [] if system is None else [_system_to_neutral(system)]
    previous: Any = None
    calls: set[str] = set()  # tool_use ids of the assistant messages just before
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise UnrecognisedHistory(f"message {i} is not an object")
        _check_blocks(i, msg.get("content"))
        role = msg.get("role")
        after_assistant = isinstance(previous, dict) and previous.get("role") == "assistant"
        if role == "assistant" and after_assistant:
            # Anthropic joins consecutive assistant messages into one turn: so does the core.
            out[-1] = _assistant_run([*out[-1][X_ITEMS], msg])
            calls |= tool_use_ids(msg)
        elif role == "assistant":
            out.append(assistant_to_neutral(msg))
            calls = tool_use_ids(msg)
        elif role == "user":
            out.extend(_user_to_neutral(i, msg, calls if after_assistant else set()))
        elif role == "system":
            # Claude Code's mid-conversation instructions: ordinary content for the core,
            # so they stay at their place (a leading system would be moved by a summary).
            out.append({"role": "user", "content": parts(msg["content"]), X_ITEMS: [msg]})
        else:
            raise UnrecognisedHistory(f"message {i} has no known role")
        previous = msg
    if messages:
        out[1 if system is not None else 0][X_FIRST] = True
    return out


def assistant_to_neutral(message: dict[str, Any]) -> dict[str, Any]:
    """One assistant message (a request's, or a reply reduced to role and content)."""
    return _assistant_run([message])


def _assistant_run(originals: list[dict[str, Any]]) -> dict[str, Any]:
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for message in originals:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "thinking" and isinstance(block.get("thinking"), str):
                thinking.append(block["thinking"])
            elif kind == "tool_use":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise UnrecognisedHistory("a tool_use block without a string id and name")
                function = {"name": block["name"], "arguments": json_text(block.get("input", {}))}
                calls.append({"id": block["id"], "type": "function", "function": function})
    neutral: dict[str, Any] = {"role": "assistant", "content": _run_text(originals)}
    if calls:
        neutral["tool_calls"] = calls
    if thinking:
        neutral["reasoning_content"] = "\n".join(thinking)
    neutral[X_ITEMS] = list(originals)
    return neutral


def _run_text(originals: list[dict[str, Any]]) -> str | None:
    texts = [t for t in (assistant_text(m.get("content")) for m in originals) if t]
    return "\n".join(texts) or None


def reply_to_neutral(reply: dict[str, Any]) -> dict[str, Any]:
    """A Messages reply (`type: message`) as the neutral assistant message that follows it."""
    return assistant_to_neutral({"role": "assistant", "content": reply.get("content") or []})


def _system_to_neutral(system: Any) -> dict[str, Any]:
    if isinstance(system, str):
        return {"role": "system", "content": system, X_SYSTEM: True, X_ITEMS: [system]}
    if isinstance(system, list) and all(isinstance(b, dict) for b in system):
        text = "\n".join(b["text"] for b in system if isinstance(b.get("text"), str))
        return {"role": "system", "content": text, X_SYSTEM: True, X_ITEMS: list(system)}
    raise UnrecognisedHistory("system is neither text nor a list of blocks")


def _check_blocks(i: int, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise UnrecognisedHistory(f"message {i}: content is neither text nor blocks")
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise UnrecognisedHistory(f"message {i}: a block without a type")


def _user_to_neutral(i: int, msg: dict[str, Any], calls: set[str]) -> list[dict[str, Any]]:
    content = msg["content"]
    if isinstance(content, str) or not any(b["type"] == "tool_result" for b in content):
        return [{"role": "user", "content": parts(content), X_ITEMS: [msg]}]
    envelope = {k: None if k == "content" else v for k, v in msg.items()}
    out: list[dict[str, Any]] = []
    rest = []
    for block in content:
        if block["type"] != "tool_result":
            rest.append(block)
            continue
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or call_id not in calls:
            raise UnrecognisedHistory(f"message {i}: a tool_result without its tool_use")
        out.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": tool_content(block),
                X_ITEMS: [block],
                X_GROUP: i,
                X_ENVELOPE: envelope,
            }
        )
    if rest:
        out.append({"role": "user", "content": parts(rest), X_ITEMS: [msg], X_GROUP: i})
    return out


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
            while j < len(messages) and _same_group(messages[j], group):
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


def _same_group(msg: dict[str, Any], group: Any) -> bool:
    return msg.get(X_GROUP) == group and msg.get("role") in ("tool", "user")


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
    results = [_result_to_wire(m) for m in group if m["role"] == "tool"]
    rest_msg = next((m for m in group if m["role"] == "user"), None)
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
    content = [*pending, *results, *rest]
    wire = {k: content if k == "content" else v for k, v in envelope.items()}
    wire.setdefault("content", content)
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


def _repair(out: list[dict[str, Any]], *, whole: bool) -> None:
    """Make a history that lost its start (a summary cut) one Anthropic accepts."""
    if not whole and out and out[0].get("role") != "user":
        out.insert(0, {"role": "user", "content": CONTINUED})
    run: set[str] = set()  # tool_use ids of the assistant messages just before
    for k, msg in enumerate(out):
        content = msg.get("content")
        after_assistant = k > 0 and out[k - 1].get("role") == "assistant"
        if msg.get("role") == "assistant":
            run = (run if after_assistant else set()) | tool_use_ids(msg)
        if msg.get("role") != "user" or not isinstance(content, list):
            continue
        calls = run if after_assistant else set()
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


def _orphan_text(block: dict[str, Any]) -> dict[str, Any]:
    text = content_to_text(tool_content(block))
    return {"type": "text", "text": f"[Result of tool call {block.get('tool_use_id')}]\n{text}"}
