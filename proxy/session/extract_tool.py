"""The `extract_compacted_tool_result` tool the proxy injects and answers itself.

Level 1 compaction replaces old tool results with placeholders, and a summary replaces the
head of the conversation; this tool lets the model read an original back by its id, or search
what the session no longer sends in full (`proxy.session.lookback`). The proxy adds its
definition to the upstream request, recognises calls to it in the model's reply, answers them
from the client's own messages, and hides them from the client. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.content_text import TextForm, text_of
from proxy.session.lookback import MAX_QUERY_CHARS, Lookback, SearchScope
from proxy.session.tool_output import as_text

EXTRACT_TOOL_NAME = "extract_compacted_tool_result"
MAX_ID_LENGTH = 512

# Sent with every request that carries it, so it is as short as a clear definition allows: at
# most 60 tokens (o200k_base) over the JSON of each wire's shape, measured by
# tests/session/test_extract_tool_size.py. The placeholder tells the model when to read and
# with which ID ("[Compacted, ID: <id>. If this content is still needed, call
# extract_compacted_tool_result with this ID ..."), the summary's last line that it can search
# what the summary replaced (`proxy.rules.COMPACTED_SYSTEM_PROMPT`); the description says both
# in a line. `required` is left out: exactly one of `toolcall_id` (with an optional `offset`)
# and `query` is given, and a call that does otherwise gets a clear error text saying so.
DESCRIPTION = "Read a compacted ID or search earlier history."
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "toolcall_id": {"type": "string"},
        "offset": {"type": "integer"},
        "query": {"type": "string"},
    },
}
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


USAGE = (
    "[Error] extract_compacted_tool_result takes JSON arguments with exactly one of "
    '{"toolcall_id": "<ID>"} (optionally with "offset": <integer>) and {"query": "<text>"}.'
)


def _arguments(arguments: Any) -> dict[str, Any] | None:
    try:
        args = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        return None
    return args if isinstance(args, dict) else None


def _requested_id(args: Mapping[str, Any]) -> Any:
    return args.get("toolcall_id", args.get("tool_call_id", args.get("id")))


def _given(value: Any) -> Any:
    return None if value == "" else value


def _shown(value: str) -> str:
    """An id quoted back safely: bounded, no control characters."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in value[:80])
    return clean + ("..." if len(value) > 80 else "")


def call_kind(call: Mapping[str, Any]) -> str:
    """What an extract call asks: "read" (a `toolcall_id`), "search" (a `query`), or "invalid"
    (neither, both, or arguments that are not a JSON object), as `answer_call` reads it."""
    fn = call.get("function")
    args = _arguments(fn.get("arguments") if isinstance(fn, dict) else None)
    if args is None:
        return "invalid"
    requested, query = _given(_requested_id(args)), _given(args.get("query"))
    if (requested is None) == (query is None):
        return "invalid"
    return "read" if query is None else "search"


def answer_call(
    call: Mapping[str, Any], book: Lookback, scope: SearchScope | None = None
) -> tuple[Any, SearchScope | None]:
    """The answer to one extract call, and, for a search, the scope that gives it again.

    A read (`toolcall_id`, optional `offset`): what the id names, as the client sent it (a
    string, or its list of parts in order; `EMPTY_OUTPUT` for an empty one) when it fits one
    page, else the page at `offset` (`proxy.session.lookback.page`). A search (`query`): its
    hits (`proxy.session.lookback.search`); with `scope`, the recorded search answered again.
    Anything else: a clear error text. Each wire carries the answer in its own shape
    (`Wire.continue_body`)."""
    fn = call.get("function")
    args = _arguments(fn.get("arguments") if isinstance(fn, dict) else None)
    if args is None:
        return USAGE, None
    # A schema made strict by the API has the model fill every parameter: "" is not given.
    requested, query = _given(_requested_id(args)), _given(args.get("query"))
    if (requested is None) == (query is None):
        return USAGE, None
    if query is not None:
        if not isinstance(query, str) or not query.strip():
            return "[Error] query must be a non-empty string.", None
        if len(query) > MAX_QUERY_CHARS:
            return f"[Error] query is longer than {MAX_QUERY_CHARS} characters.", None
        found = book.search(query, scope)
        return found.text, found.scope
    offset = args.get("offset", 0)
    if offset is None:
        offset = 0
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return "[Error] offset must be a non-negative integer.", None
    if not isinstance(requested, str):
        return USAGE, None
    got = book.read(requested, offset) if len(requested) <= MAX_ID_LENGTH else None
    if got is not None:
        return got, None
    return (
        f"[Error] Nothing has ID '{_shown(requested)}'. Use an ID exactly as shown in a "
        "'[Compacted, ID: ...]' placeholder or a search hit, search with a query, or re-run "
        "the tool."
    ), None


def answer_content(call: Mapping[str, Any], originals: Mapping[str, Any]) -> Any:
    """`answer_call` over the originals of tool results alone (reads; a search finds nothing)."""
    return answer_call(call, Lookback([], dict(originals)))[0]


def answer(call: Mapping[str, Any], originals: Mapping[str, Any]) -> str:
    """`answer_content` as one text: parts on their own lines, a marker for each part text
    cannot carry (`proxy.session.tool_output.as_text`); never empty."""
    return as_text(answer_content(call, originals))
