"""The rest of a Messages request: summary placement, cache breakpoints, tools, checks.

`with_summary` appends the level-2 summary as a text block after the client's `system`
blocks, with a cache breakpoint so tools + system + summary cache as one stable prefix;
`limit_breakpoints` keeps a request within Anthropic's 4 `cache_control` breakpoints;
`EXTRACT_TOOL` / `inject_tool` add the proxy's tool in Anthropic's shape; `check_request`
finds what Anthropic would refuse with a 400, so the proxy answers it the same way.
Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from proxy.extract_tool import EXTRACT_TOOL_NAME, TOOL_DEFINITION
from proxy.wire.messages_blocks import tool_use_ids

MAX_BREAKPOINTS = 4

_FUNCTION = TOOL_DEFINITION["function"]
EXTRACT_TOOL: dict[str, Any] = {
    "name": EXTRACT_TOOL_NAME,
    "description": _FUNCTION["description"],
    "input_schema": copy.deepcopy(_FUNCTION["parameters"]),
}

# -- tools ----------------------------------------------------------------------------------


def client_defines_tool(tools: Any) -> bool:
    """True when a client tool already has our tool's name: then we neither add nor answer."""
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("name") == EXTRACT_TOOL_NAME for t in tools
    )


def inject_tool(tools: Any) -> list[Any]:
    """The client's tools unchanged (custom and server tools), ours last: a stable prefix."""
    return [*(tools if isinstance(tools, list) else ()), copy.deepcopy(EXTRACT_TOOL)]


def is_extract_use(block: Any) -> bool:
    """A `tool_use` block calling the proxy's extract tool."""
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and block.get("name") == EXTRACT_TOOL_NAME
    )


# -- summary and cache breakpoints ----------------------------------------------------------


def _marks(blocks: Any) -> Iterator[dict[str, Any]]:
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, dict) and isinstance(block.get("cache_control"), dict):
            yield block["cache_control"]


def _message_marks(messages: Sequence[Any]) -> Iterator[dict[str, Any]]:
    for _, _, _, mark in _message_breakpoints(messages):
        yield mark


def with_summary(
    system: Any, summary_text: str, messages: Sequence[Any] = ()
) -> list[dict[str, Any]]:
    """The client's system blocks verbatim, then the summary block, marked for caching.

    The mark copies the client's last system breakpoint, else its first one in `messages`,
    so Anthropic's rule (a longer TTL never after a shorter one) still holds.
    """
    if isinstance(system, str):
        blocks: list[Any] = [{"type": "text", "text": system}] if system else []
    else:
        blocks = list(system) if isinstance(system, list) else []
    before = list(_marks(blocks))
    after = next(_message_marks(messages), None)
    mark = dict(before[-1] if before else after or {"type": "ephemeral"})
    return [*blocks, {"type": "text", "text": summary_text, "cache_control": mark}]


Where = tuple[int, int, int | None, dict[str, Any]]  # message, block, nested block, mark


def _message_breakpoints(messages: Sequence[Any]) -> Iterator[Where]:
    for k, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, dict) else None
        for b, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            if isinstance(block.get("cache_control"), dict):
                yield k, b, None, block["cache_control"]
            nested = block.get("content") if block.get("type") == "tool_result" else None
            for n, inner in enumerate(nested if isinstance(nested, list) else ()):
                if isinstance(inner, dict) and isinstance(inner.get("cache_control"), dict):
                    yield k, b, n, inner["cache_control"]


def count_breakpoints(system: Any, tools: Any, messages: Sequence[Any]) -> int:
    """The `cache_control` breakpoints of a request: tools, system and message blocks."""
    return (
        len(list(_marks(tools)))
        + len(list(_marks(system)))
        + len(list(_message_breakpoints(messages)))
    )


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def limit_breakpoints(
    system: Any, tools: Any, messages: list[Any], limit: int = MAX_BREAKPOINTS
) -> tuple[Any, Any, list[Any]]:
    """(system, tools, messages) with at most `limit` breakpoints; the inputs are not edited.

    Dropped first: the earliest in `messages` (the newest mark the growing prefix); then,
    in prompt order, tools and system blocks, so the last system mark (the whole system,
    the summary block included) goes last. A later mark caches everything before it too.
    Changed blocks and messages are copies; the rest are the very same objects.
    """
    in_messages = list(_message_breakpoints(messages))
    in_system = [i for i, b in enumerate(system) if _marked(b)] if isinstance(system, list) else []
    in_tools = [i for i, t in enumerate(tools) if _marked(t)] if isinstance(tools, list) else []
    excess = len(in_messages) + len(in_system) + len(in_tools) - limit
    if excess <= 0:
        return system, tools, messages
    drop_messages = in_messages[:excess]
    excess -= len(drop_messages)
    order = [*(("tools", i) for i in in_tools), *(("system", i) for i in in_system)]
    drop_system = {i for area, i in order[:excess] if area == "system"}
    drop_tools = {i for area, i in order[:excess] if area == "tools"}
    if drop_system:
        system = [_unmarked(b) if i in drop_system else b for i, b in enumerate(system)]
    if drop_tools:
        tools = [_unmarked(t) if i in drop_tools else t for i, t in enumerate(tools)]
    messages = list(messages)
    for k, b, n, _ in drop_messages:
        msg = messages[k]
        content = list(msg["content"])
        if n is None:
            content[b] = _unmarked(content[b])
        else:
            nested = list(content[b]["content"])
            nested[n] = _unmarked(nested[n])
            content[b] = {**content[b], "content": nested}
        messages[k] = {**msg, "content": content}
    return system, tools, messages


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("cache_control"), dict)


# -- checks ---------------------------------------------------------------------------------


class InvalidRequest(ValueError):
    """A request Anthropic would refuse (400, `invalid_request_error`); the text says why."""


_ROLES = ("user", "assistant", "system")


def request_error(body: Any) -> str | None:
    """Why Anthropic would refuse this body, in its style of message; None when it is fine."""
    try:
        check_request(body)
    except InvalidRequest as exc:
        return str(exc)
    return None


def check_request(body: Any) -> None:
    """Raise InvalidRequest for a malformed body (structure only: the upstream judges the rest)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    _check_system(body.get("system"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Input should be a valid list")
    if not messages:
        raise InvalidRequest("messages: at least one message is required")
    previous: Any = None
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(msg, dict):
            raise InvalidRequest(f"{where}: Input should be an object")
        if msg.get("role") not in _ROLES:
            raise InvalidRequest(f"{where}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        if not isinstance(content, str | list):
            raise InvalidRequest(f"{where}.content: Input should be a string or a list of blocks")
        calls = tool_use_ids(previous)
        for j, block in enumerate(content if isinstance(content, list) else ()):
            _check_block(f"{where}.content.{j}", block, msg["role"], calls)
        previous = msg


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise InvalidRequest("system: Input should be a string or a list of text blocks")
    for j, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise InvalidRequest(f"system.{j}: Input should be a text block")
        if not isinstance(block.get("text"), str):
            raise InvalidRequest(f"system.{j}.text: Field required (a string)")


def _check_block(where: str, block: Any, role: str, calls: set[str]) -> None:
    if not isinstance(block, dict):
        raise InvalidRequest(f"{where}: Input should be an object")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise InvalidRequest(f"{where}.type: Field required")
    if kind == "text" and not isinstance(block.get("text"), str):
        raise InvalidRequest(f"{where}.text: Field required (a string)")
    if kind == "tool_use":
        for field in ("id", "name"):
            if not isinstance(block.get(field), str):
                raise InvalidRequest(f"{where}.tool_use.{field}: Field required (a string)")
        if "input" in block and not isinstance(block["input"], dict):
            raise InvalidRequest(f"{where}.tool_use.input: Input should be an object")
    if kind != "tool_result":
        return
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise InvalidRequest(f"{where}.tool_result.tool_use_id: Field required (a string)")
    if role != "user" or call_id not in calls:
        raise InvalidRequest(
            f"{where}: unexpected `tool_use_id` in a `tool_result` block: {call_id[:80]}. "
            "Each `tool_result` block must answer a `tool_use` block of the message just "
            "before it."
        )
    content = block.get("content")
    if content is not None and not isinstance(content, str | list):
        raise InvalidRequest(f"{where}.tool_result.content: Input should be a string or a list")
    for n, inner in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(inner, dict) or not isinstance(inner.get("type"), str):
            raise InvalidRequest(f"{where}.tool_result.content.{n}.type: Field required")
