"""The proxy's extract tool in the Responses API's shape: its definition (a flat, strict
function tool), whether a client already defines one of its name, and whether an output item
calls it. Pure: no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from proxy.session.extract_tool import EXTRACT_TOOL_NAME, TOOL_DEFINITION

_FUNCTION: dict[str, Any] = TOOL_DEFINITION["function"]

# `strict: false` and no `required` or `additionalProperties`: with `strict` left out, OpenAI's
# Responses API turns a schema that can be made strict into a strict one itself, every property
# then required, where the tool takes exactly one of `toolcall_id` and `query` (a call that
# sends the other as "" is read as without it, `proxy.session.extract_tool.answer_call`).
EXTRACT_TOOL: dict[str, Any] = {
    "type": "function",
    "name": EXTRACT_TOOL_NAME,
    "description": _FUNCTION["description"],
    "parameters": copy.deepcopy(_FUNCTION["parameters"]),
    "strict": False,
}


def is_extract_tool(tool: Any) -> bool:
    """A tool definition (flat Responses shape or nested chat shape) named like ours."""
    if not isinstance(tool, dict):
        return False
    fn = tool.get("function")
    nested = fn.get("name") if isinstance(fn, dict) else None
    return EXTRACT_TOOL_NAME in (tool.get("name"), nested)


def client_defines_tool(tools: Any) -> bool:
    """True when the client has a tool of our name: then we neither inject nor answer."""
    return isinstance(tools, list) and any(is_extract_tool(t) for t in tools)


def inject_tool(tools: Any) -> list[Any]:
    """The client's tools (of every type, unchanged) with ours appended last."""
    base = list(tools) if isinstance(tools, list) else []
    return [*base, EXTRACT_TOOL]


def is_extract_item(item: Any) -> bool:
    """A `function_call` output item calling our tool."""
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call"
        and item.get("name") == EXTRACT_TOOL_NAME
    )
