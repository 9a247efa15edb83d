"""The Messages wire's slow, plain reference versions, kept as oracles for the fast ones.

`to_neutral` here is `proxy.wire.messages_blocks.to_neutral` as it was before the
one-pass rewrite in `proxy.wire.messages_neutral` (it checks every block of a message, then
converts it): `test_messages_fast` holds the fast one to it, output, sharing and errors.
"""

from __future__ import annotations

from typing import Any

from proxy.session import UnrecognisedHistory
from proxy.wire.messages_content import (
    assistant_text,
    json_text,
    parts,
    tool_content,
    tool_use_ids,
)
from proxy.wire.messages_neutral import X_ENVELOPE, X_FIRST, X_GROUP, X_ITEMS, X_SYSTEM


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
