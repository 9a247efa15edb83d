"""The `extract_compacted_tool_result` tool the proxy injects and answers itself.

Level 1 compaction replaces old tool results with placeholders; this tool lets the model get
an original back. The proxy adds its definition to the upstream request, recognises calls to
it in the model's reply, answers them from the client's own messages, and hides them from the
client. Everything here is pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.content_text import TextForm, text_of
from proxy.session.tool_output import EMPTY_OUTPUT, as_text, is_empty

EXTRACT_TOOL_NAME = "extract_compacted_tool_result"
MAX_ID_LENGTH = 512

# Sent with every request that carries it, so it is as short as a clear definition allows: at
# most 40 tokens (o200k_base) over the JSON of each wire's shape, measured by
# tests/session/test_extract_tool_size.py. The placeholder itself tells the model when to call
# it and with which ID ("[Compacted, ID: <id>. If this content is still needed, call
# extract_compacted_tool_result with this ID ..."), so the description only says what comes
# back. `required` is left out (7 tokens): the one parameter is what the placeholder names, and
# a call without it gets a clear error text naming it.
DESCRIPTION = "The original tool output."
PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"toolcall_id": {"type": "string"}}}
TOOL_DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {"name": EXTRACT_TOOL_NAME, "description": DESCRIPTION, "parameters": PARAMETERS},
}


def client_defines_tool(tools: Any) -> bool:
    """True when the client already has a tool of ours' name: then we neither inject nor answer."""
    if not isinstance(tools, list):
        return False
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == EXTRACT_TOOL_NAME:
            return True
    return False


def inject(tools: Any) -> list[Any]:
    """The client's tools with ours appended last, so the client's prefix stays stable."""
    base = list(tools) if isinstance(tools, list) else []
    return [*base, TOOL_DEFINITION]


def is_extract_call(call: Any) -> bool:
    fn = call.get("function") if isinstance(call, dict) else None
    return isinstance(fn, dict) and fn.get("name") == EXTRACT_TOOL_NAME


def split_calls(calls: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the client's own calls, the extract calls) of an assistant message's tool_calls."""
    own: list[dict[str, Any]] = []
    extract: list[dict[str, Any]] = []
    for call in calls if isinstance(calls, list) else []:
        (extract if is_extract_call(call) else own).append(call)
    return own, extract


def _plain_part(part: Any) -> str:
    return str(part.get("text") or "") if isinstance(part, dict) else str(part)


def _plain_whole(content: Any) -> str:
    return orjson.dumps(content).decode()


# Text parts run together with no separator; a dict part without text is "", any other
# part `str()`; a content that is not a list its JSON.
PLAIN = TextForm(part=_plain_part, whole=_plain_whole, sep="")


def content_text(content: Any) -> str:
    """A tool result's content as text (`PLAIN`: list content joins its text parts)."""
    return text_of(content, PLAIN)


def _requested_id(arguments: Any) -> str | None:
    try:
        args = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, dict):
        return None
    value = args.get("toolcall_id", args.get("tool_call_id", args.get("id")))
    return value if isinstance(value, str) else None


def _shown(value: str) -> str:
    """An id quoted back safely: bounded, no control characters."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in value[:80])
    return clean + ("..." if len(value) > 80 else "")


def answer_content(call: Mapping[str, Any], originals: Mapping[str, Any]) -> Any:
    """The answer to one extract call: the original output whole, as the client sent it (a
    string, or its list of parts in order; `EMPTY_OUTPUT` for an empty one), or a clear error
    text. Each wire carries it in its own shape (`Wire.continue_body`)."""
    fn = call.get("function")
    requested = _requested_id(fn.get("arguments") if isinstance(fn, dict) else None)
    if requested is None:
        return (
            "[Error] extract_compacted_tool_result needs a JSON argument "
            '{"toolcall_id": "<ID from the placeholder>"}.'
        )
    if len(requested) <= MAX_ID_LENGTH and requested in originals:
        original = originals[requested]
        return EMPTY_OUTPUT if is_empty(original) else original
    return (
        f"[Error] No compacted tool result has ID '{_shown(requested)}'. Use an ID exactly as "
        "shown in a '[Compacted, ID: ...]' placeholder, or re-run the tool."
    )


def answer(call: Mapping[str, Any], originals: Mapping[str, Any]) -> str:
    """`answer_content` as one text: parts on their own lines, a marker for each part text
    cannot carry (`proxy.session.tool_output.as_text`); never empty."""
    return as_text(answer_content(call, originals))
