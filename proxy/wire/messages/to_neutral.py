"""Anthropic Messages requests -> the neutral (Chat Completions-shaped) messages of the core.

`to_neutral` turns `system` + `messages` into neutral messages that carry their wire
originals under `x_items` (the way back is `proxy.wire.messages.from_neutral`). The mapping:
`system` -> one leading system message; an assistant message -> one assistant message (text
as content, `tool_use` blocks as tool_calls, thinking as reasoning_content); a user message
-> one tool message per `tool_result` block, then a user message for its other blocks, all
marked with the index of the message they came from (`x_group`) so they are regrouped; a
mid-conversation `system` message -> a user message holding it, so it keeps its place.

Every request takes this path, so a message's blocks are checked and converted in one pass
that builds nothing per block beyond what the neutral message holds; its faults are raised
in the order a check of every block before converting any would give. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.session.history import X_PROVIDER_COMPACTION, UnrecognisedHistory
from proxy.wire.messages.content import assistant_text, json_text, part, parts, tool_use_ids
from proxy.wire.provider_compaction import has_compaction_block

# Private keys of neutral messages (the core ignores them and keeps them on its copies).
X_ITEMS = "x_items"  # the original wire objects, never edited
X_SYSTEM = "x_system"  # the leading message made from the top-level `system`
X_GROUP = "x_group"  # index of the user message a tool result (or the rest) came from
X_ENVELOPE = "x_envelope"  # that user message's keys, content left out (None)
X_FIRST = "x_first"  # made from the client's first message: its history starts here

_NO_TYPE = "message {}: a block without a type"
_NO_ID = "a tool_use block without a string id and name"


@dataclass(frozen=True)
class Converted:
    """A request's neutral messages, and where converting went on from after its last
    message (`convert(..., before=...)`). Never changed once made: a later request's
    conversion copies the list and leaves its messages as they are."""

    neutral: list[dict[str, Any]]
    count: int  # the wire messages converted
    after_assistant: bool
    calls: frozenset[str]  # tool_use ids of the assistant messages just before the end


def to_neutral(system: Any, messages: Any) -> list[dict[str, Any]]:
    """Neutral messages for a Messages request; UnrecognisedHistory if it is not one."""
    return convert(system, messages).neutral


def convert(system: Any, messages: Any, before: Converted | None = None) -> Converted:
    """`to_neutral`, as a `Converted`; with `before`, the conversion of the same `system` and
    of the first `before.count` of these messages (an earlier request's), only the messages
    after them are converted: what converting them all would give."""
    if not isinstance(messages, list):
        raise UnrecognisedHistory("messages is not a list")
    if before is None or not 0 < before.count <= len(messages):
        out = [] if system is None else [_system_to_neutral(system)]
        start, after_assistant, calls = 0, False, set[str]()
    else:
        out, start = list(before.neutral), before.count
        after_assistant, calls = before.after_assistant, set(before.calls)
    for i in range(start, len(messages)):
        msg = messages[i]
        if not isinstance(msg, dict):
            raise UnrecognisedHistory(f"message {i} is not an object")
        role = msg.get("role")
        if role == "assistant" and not after_assistant:
            calls = set()
            out.append(_assistant(i, msg, calls))
        elif role == "user":
            _user(i, msg, calls if after_assistant else set(), out)
        else:
            _check_blocks(i, msg.get("content"))
            if role == "assistant":
                # Anthropic joins consecutive assistant messages into one turn: so does the core.
                out[-1] = _assistant_run([*out[-1][X_ITEMS], msg])
                calls |= tool_use_ids(msg)
            elif role == "system":
                # Claude Code's mid-conversation instructions: ordinary content for the core,
                # so they stay at their place (a leading system would be moved by a summary).
                out.append({"role": "user", "content": parts(msg["content"]), X_ITEMS: [msg]})
            else:
                raise UnrecognisedHistory(f"message {i} has no known role")
        after_assistant = role == "assistant"
    if messages:  # (already there on a message kept from `before`: the same value)
        out[1 if system is not None else 0][X_FIRST] = True
    return Converted(out, len(messages), after_assistant, frozenset(calls))


def _assistant(i: int, msg: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """`assistant_to_neutral(msg)`, its blocks checked as they are read; adds the ids of its
    `tool_use` blocks to `ids`."""
    content = msg.get("content")
    if not isinstance(content, list):
        _check_blocks(i, content)
        return assistant_to_neutral(msg)
    texts: list[str] = []
    thinking: list[str] = []
    uses: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise UnrecognisedHistory(_NO_TYPE.format(i))
        if kind == "thinking":
            value = block.get("thinking")
            if isinstance(value, str):
                thinking.append(value)
        elif kind == "tool_use":
            uses.append(block)
        elif kind == "text":
            value = block.get("text")
            if isinstance(value, str):
                texts.append(value)
    neutral: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if uses:
        tool_calls = []
        for block in uses:
            call = _call(block)
            ids.add(call["id"])
            tool_calls.append(call)
        neutral["tool_calls"] = tool_calls
    if thinking:
        neutral["reasoning_content"] = "\n".join(thinking)
    if has_compaction_block(content):  # the provider's own: the session begins again here
        neutral[X_PROVIDER_COMPACTION] = True
    neutral[X_ITEMS] = [msg]
    return neutral


def _call(block: dict[str, Any]) -> dict[str, Any]:
    call_id = block.get("id")
    name = block.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise UnrecognisedHistory(_NO_ID)
    function = {"name": name, "arguments": json_text(block.get("input", {}))}
    return {"id": call_id, "type": "function", "function": function}


def _user(i: int, msg: dict[str, Any], calls: set[str], out: list[dict[str, Any]]) -> None:
    """The neutral messages of one user message, appended to `out`."""
    content = msg.get("content")
    if isinstance(content, str):
        out.append({"role": "user", "content": content, X_ITEMS: [msg]})
        return
    if not isinstance(content, list):
        raise UnrecognisedHistory(f"message {i}: content is neither text nor blocks")
    results: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise UnrecognisedHistory(_NO_TYPE.format(i))
        if kind == "tool_result":
            results.append(block)
    if not results:
        out.append({"role": "user", "content": _parts(content), X_ITEMS: [msg]})
        return
    envelope = dict(msg)  # the message's keys in their order, content left out
    envelope["content"] = None
    for block in results:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or call_id not in calls:
            raise UnrecognisedHistory(f"message {i}: a tool_result without its tool_use")
        result = block.get("content")
        out.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": "" if result is None else _parts(result),
                X_ITEMS: [block],
                X_GROUP: i,
                X_ENVELOPE: envelope,
            }
        )
    if len(results) < len(content):
        rest = [block for block in content if block["type"] != "tool_result"]
        out.append({"role": "user", "content": _parts(rest), X_ITEMS: [msg], X_GROUP: i})


def _parts(content: Any) -> Any:
    """`parts(content)`, text blocks made without a call each."""
    if not isinstance(content, list):
        return content
    out: list[Any] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                out.append({"type": "text", "text": text})
                continue
        out.append(part(block))
    return out


def _check_blocks(i: int, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise UnrecognisedHistory(f"message {i}: content is neither text nor blocks")
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise UnrecognisedHistory(_NO_TYPE.format(i))


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
                calls.append(_call(block))
    neutral: dict[str, Any] = {"role": "assistant", "content": run_text(originals)}
    if calls:
        neutral["tool_calls"] = calls
    if thinking:
        neutral["reasoning_content"] = "\n".join(thinking)
    if any(has_compaction_block(m.get("content")) for m in originals):
        neutral[X_PROVIDER_COMPACTION] = True
    neutral[X_ITEMS] = list(originals)
    return neutral


def run_text(originals: list[dict[str, Any]]) -> str | None:
    """The text of a run of assistant messages (each one's text blocks joined), None without."""
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
