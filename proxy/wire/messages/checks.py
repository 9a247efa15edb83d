"""What Anthropic would refuse with a 400 in a Messages request, found before it goes up.

`check_request` is the reference: it walks the body and raises `MalformedRequest` with the
message Anthropic would give. `request_error`, which every request passes through, first
asks `checked` (`plainly_valid`), one tight pass that only says yes or "not sure" (a yes
means `check_request` finds nothing); the reference runs on a "not sure" and says why, so
the fast pass never decides an error message. `checked` can go on from an earlier request's
answer for the same first messages: an agent resends its history every turn, and only what
it added is looked at. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.errors import UnreadableInput
from proxy.wire.messages.content import tool_use_ids


class MalformedRequest(UnreadableInput, ValueError):
    """A request Anthropic would refuse (400, `invalid_request_error`); the text says why."""


_ROLES = ("user", "assistant", "system")


def request_error(body: Any) -> str | None:
    """Why Anthropic would refuse this body, in its style of message; None when it is fine."""
    if checked(body) is not None:
        return None
    try:
        check_request(body)
    except MalformedRequest as exc:
        return str(exc)
    return None


def check_request(body: Any) -> None:
    """Raise MalformedRequest for a malformed body (its shape; the upstream judges the rest)."""
    if not isinstance(body, dict):
        raise MalformedRequest("The request body must be a JSON object.")
    _check_system(body.get("system"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise MalformedRequest("messages: Input should be a valid list")
    if not messages:
        raise MalformedRequest("messages: at least one message is required")
    previous: Any = None
    calls: set[str] = set()  # the tool_use ids a tool_result here may answer
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(msg, dict):
            raise MalformedRequest(f"{where}: Input should be an object")
        role = msg.get("role")
        if role not in _ROLES:
            raise MalformedRequest(f"{where}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        if not isinstance(content, str | list):
            raise MalformedRequest(f"{where}.content: Input should be a string or a list of blocks")
        # Anthropic joins consecutive messages of one role into one turn: the calls of a run
        # of assistant messages may be answered anywhere in the user messages that follow.
        before = previous.get("role") if isinstance(previous, dict) else None
        if role == "assistant":
            calls = (calls if before == "assistant" else set()) | tool_use_ids(msg)
        elif role != "user" or before not in ("assistant", "user"):
            calls = set()
        for j, block in enumerate(content if isinstance(content, list) else ()):
            _check_block(f"{where}.content.{j}", block, str(role), calls)
        previous = msg


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise MalformedRequest("system: Input should be a string or a list of text blocks")
    for j, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise MalformedRequest(f"system.{j}: Input should be a text block")
        if not isinstance(block.get("text"), str):
            raise MalformedRequest(f"system.{j}.text: Field required (a string)")


def _check_block(where: str, block: Any, role: str, calls: set[str]) -> None:
    if not isinstance(block, dict):
        raise MalformedRequest(f"{where}: Input should be an object")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise MalformedRequest(f"{where}.type: Field required")
    if kind == "text" and not isinstance(block.get("text"), str):
        raise MalformedRequest(f"{where}.text: Field required (a string)")
    if kind == "tool_use":
        for field in ("id", "name"):
            if not isinstance(block.get(field), str):
                raise MalformedRequest(f"{where}.tool_use.{field}: Field required (a string)")
        if "input" in block and not isinstance(block["input"], dict):
            raise MalformedRequest(f"{where}.tool_use.input: Input should be an object")
    if kind != "tool_result":
        return
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise MalformedRequest(f"{where}.tool_result.tool_use_id: Field required (a string)")
    if role != "user" or call_id not in calls:
        raise MalformedRequest(
            f"{where}: unexpected `tool_use_id` in a `tool_result` block: {call_id[:80]}. "
            "Each `tool_result` block must answer a `tool_use` block of the assistant turn "
            "just before it."
        )
    content = block.get("content")
    if content is not None and not isinstance(content, str | list):
        raise MalformedRequest(f"{where}.tool_result.content: Input should be a string or a list")
    for n, inner in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(inner, dict) or not isinstance(inner.get("type"), str):
            raise MalformedRequest(f"{where}.tool_result.content.{n}.type: Field required")


# -- the fast pass --------------------------------------------------------------------------


def plainly_valid(body: Any) -> bool:
    """True only when `check_request` would find nothing, in one pass with no messages built.

    False is "not sure": the caller asks `check_request`, which says why (or finds nothing).
    Every test here is one of `check_request`'s, made without building its error text.
    """
    return checked(body) is not None


@dataclass(frozen=True)
class Checked:
    """How far `checked` went: the messages it found plainly valid, the last one's role,
    and the `tool_use` ids a `tool_result` in the next user message may answer."""

    count: int
    role: Any
    calls: frozenset[str]


def checked(body: Any, before: Checked | None = None) -> Checked | None:
    """`plainly_valid`, and where it got to: None is "not sure".

    With `before`, an earlier request's `Checked` for the same `system` and the first
    `before.count` of these messages (the caller knows them to be byte for byte the same),
    only the messages after them are looked at: the answer a look at all of them gives.
    """
    if not isinstance(body, dict):
        return None
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    if before is not None and 0 < before.count <= len(messages):
        start, role_before, calls = before.count, before.role, set(before.calls)
    else:
        if not _system_valid(body.get("system")):
            return None
        start, role_before, calls = 0, None, set()
    for i in range(start, len(messages)):
        msg = messages[i]
        if not isinstance(msg, dict):
            return None
        role = msg.get("role")
        content = msg.get("content")
        if isinstance(content, list):
            blocks: Any = content
        elif isinstance(content, str):
            blocks = ()
        else:
            return None
        if role == "user":
            if role_before != "assistant" and role_before != "user":
                calls = set()
            if not _user_blocks_valid(blocks, calls):
                return None
        elif role == "assistant":
            if role_before != "assistant":
                calls = set()
            if not _assistant_blocks_valid(blocks, calls):
                return None
        elif role == "system":
            calls = set()
            if not _system_blocks_valid(blocks):
                return None
        else:
            return None
        role_before = role
    return Checked(len(messages), role_before, frozenset(calls))


def _system_valid(system: Any) -> bool:
    if system is None or isinstance(system, str):
        return True
    if not isinstance(system, list):
        return False
    for block in system:
        if not isinstance(block, dict) or block.get("type") != "text":
            return False
        if not isinstance(block.get("text"), str):
            return False
    return True


def _user_blocks_valid(blocks: Any, calls: set[str]) -> bool:
    for block in blocks:
        if not isinstance(block, dict):
            return False
        kind = block.get("type")
        if not isinstance(kind, str):
            return False
        if kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in calls:
                return False
            content = block.get("content")
            if content is None or isinstance(content, str):
                continue
            if not isinstance(content, list):
                return False
            for inner in content:
                if not (isinstance(inner, dict) and isinstance(inner.get("type"), str)):
                    return False
        elif kind == "text":
            if not isinstance(block.get("text"), str):
                return False
        elif kind == "tool_use" and not _tool_use_valid(block):
            return False
    return True


def _assistant_blocks_valid(blocks: Any, calls: set[str]) -> bool:
    """Also adds the message's `tool_use` ids to `calls` (what `tool_use_ids` would give,
    since a valid `tool_use` has a string id)."""
    for block in blocks:
        if not isinstance(block, dict):
            return False
        kind = block.get("type")
        if not isinstance(kind, str):
            return False
        if kind == "tool_use":
            if not _tool_use_valid(block):
                return False
            calls.add(block["id"])
        elif kind == "text":
            if not isinstance(block.get("text"), str):
                return False
        elif kind == "tool_result":
            return False  # only a user message may answer a call
    return True


def _system_blocks_valid(blocks: Any) -> bool:
    return _assistant_blocks_valid(blocks, set())  # the same rules, no calls to answer


def _tool_use_valid(block: dict[str, Any]) -> bool:
    return (
        isinstance(block.get("id"), str)
        and isinstance(block.get("name"), str)
        and ("input" not in block or isinstance(block["input"], dict))
    )
