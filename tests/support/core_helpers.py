"""Builders for agent conversations and a checker for OpenAI message-sequence validity."""

from __future__ import annotations

from typing import Any

from proxy.conversation import Conversation


def tool_call(call_id: str, name: str = "lookup", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_calling(*call_ids: str, **extra: Any) -> dict[str, Any]:
    calls = [tool_call(i) for i in call_ids]
    return {"role": "assistant", "content": None, "tool_calls": calls, **extra}


def add_tool_turn(conversation: Conversation, call_id: str, result: str) -> None:
    """One assistant call and its result."""
    conversation.add_agent_message(assistant_calling(call_id))
    conversation.add_tool_result(call_id, result)


def agent_conversation(turns: int = 3, calls_per_turn: int = 2, size: int = 400) -> Conversation:
    """A system section, then per turn: user, tool calls with results, a final answer."""
    conversation = Conversation()
    conversation.set_persistent_section("client", "You are a helpful agent.")
    for turn in range(turns):
        conversation.add_user_message(f"question {turn}")
        for call in range(calls_per_turn):
            add_tool_turn(conversation, f"call_{turn}_{call}", f"{turn}/{call}:" + "r" * size)
        conversation.add_agent_message({"role": "assistant", "content": f"answer {turn}"})
    return conversation


def sequence_errors(params: list[dict[str, Any]]) -> list[str]:
    """Why `params` is not a valid chat sequence: tool results must directly follow the
    assistant message that called them, and every call must have its result."""
    errors: list[str] = []
    pending: set[str] | None = None  # ids still awaiting results in the current tool block
    for index, param in enumerate(params):
        role = param.get("role")
        if role not in {"system", "developer", "user", "assistant", "tool"}:
            errors.append(f"{index}: unknown role {role!r}")
        if role == "tool":
            call_id = param.get("tool_call_id")
            if pending is None or call_id not in pending:
                errors.append(f"{index}: tool result {call_id!r} without its assistant call")
            else:
                pending.discard(call_id)
            continue
        if pending:
            errors.append(f"{index}: calls {sorted(pending)} have no result")
        pending = None
        if role == "assistant" and param.get("tool_calls"):
            pending = {call["id"] for call in param["tool_calls"]}
    if pending:
        errors.append(f"end: calls {sorted(pending)} have no result")
    return errors
