"""The rest of a Messages request: bodies, summary placement, cache breakpoints, tools, errors.

`upstream_body` / `continue_body` / `summary_body` build what goes upstream from neutral
messages; `with_summary` appends the level-2 summary as a text block after the client's
`system` blocks, with a cache breakpoint so tools + system + summary cache as one stable
prefix; `limit_breakpoints` keeps a request within Anthropic's 4 `cache_control`
breakpoints; `EXTRACT_TOOL` / `inject_tool` add the proxy's tool in Anthropic's shape;
`error_body` answers in Anthropic's shape what `proxy.wire.messages.checks` finds it would
refuse with a 400 (its checks are imported here too, where they used to live). Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from proxy.errors import anthropic_payload
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, TOOL_DEFINITION, content_text
from proxy.session.rebuild import Outgoing
from proxy.session.tool_output import as_text
from proxy.wire.base import JSON, Round
from proxy.wire.messages.content import from_parts
from proxy.wire.messages.from_neutral import from_neutral

MAX_BREAKPOINTS = 4
SUMMARY_MAX_TOKENS = 8192  # Anthropic requires max_tokens; a summary of 8 sections fits

_FUNCTION = TOOL_DEFINITION["function"]
EXTRACT_TOOL: dict[str, Any] = {
    "name": EXTRACT_TOOL_NAME,
    "description": _FUNCTION["description"],
    "input_schema": copy.deepcopy(_FUNCTION["parameters"]),
}

# -- bodies ---------------------------------------------------------------------------------


def upstream_body(
    body: dict[str, Any], out: Outgoing | None, tools: Any, *, stream: bool = False
) -> dict[str, Any]:
    """The client's body with the rebuilt `system` and `messages` and the tools to send.

    `out` None: the client's messages unchanged. The client's `system` is kept verbatim;
    a summary follows it as one more block. Every other field passes unchanged (`stream`
    too: a Messages stream reports its usage without being asked). When nothing applies to
    the history (`out.unchanged`), the client's own `messages` go up as they came: what
    converting the neutral messages back would give byte for byte, without its cost.
    """
    sent = dict(body)
    if tools is not None:
        sent["tools"] = tools
    if out is None:
        return sent
    marks: int | None = None  # at most this many breakpoints in `messages`, if known
    if out.unchanged and isinstance(body.get("messages"), list):
        messages: list[Any] = list(body["messages"])
        if out.history_json is not None:
            # Every breakpoint is a `"cache_control":` key as orjson writes it (a string
            # holding those words has its quotes escaped): the count bounds theirs.
            marks = out.history_json.count(b'"cache_control":')
    else:
        _, messages = from_neutral(out.rest)
    system = body.get("system")
    if out.summary is not None:
        system = with_summary(system, out.summary, messages)
    system, sent_tools, messages = limit_breakpoints(
        system, sent.get("tools"), messages, message_marks_at_most=marks
    )
    if system is not None:
        sent["system"] = system
    if sent_tools is not None:
        sent["tools"] = sent_tools
    sent["messages"] = messages
    return sent


def continue_body(
    body: dict[str, Any], rnd: Round, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """The next round: the model's reply as it came (`rnd.raw`: thinking and signatures
    included), then one user message with the proxy's answers as `tool_result` blocks."""
    reply = rnd.raw if isinstance(rnd.raw, dict) else {}
    answers = [
        {
            "type": "tool_result",
            "tool_use_id": str(r.get("tool_call_id")),
            "content": result_content(r.get("content")),
        }
        for r in results
    ]
    assistant = {"role": "assistant", "content": reply.get("content") or []}
    tail = [assistant, {"role": "user", "content": answers}] if answers else [assistant]
    return {**body, "messages": [*body.get("messages", []), *tail]}


def result_content(content: Any) -> Any:
    """An extract answer as `tool_result` content: a string as is, parts back as the blocks
    they came from (text and images in place, documents and the rest as sent)."""
    if isinstance(content, list) and content:
        # Without the original's cache breakpoints: the answer must not add any (at most 4).
        return [
            {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
            for b in from_parts(content)
        ]
    return content if isinstance(content, str) and content else as_text(content)


def summary_body(
    body: dict[str, Any] | None, chat_body: dict[str, Any], max_tokens: int = SUMMARY_MAX_TOKENS
) -> dict[str, Any]:
    """A summary request (Chat Completions-shaped, neutral messages) as a Messages body.

    System messages become `system`; the conversation goes back to its blocks (a request
    that repeats the turn's prefix keeps its cache breakpoints). Without tools, tool blocks
    become text: Anthropic refuses them in a request without tools. For the session's own
    model, the client's (`body`) `thinking` setting goes along, since another one would
    miss the messages' cache; `max_tokens` is then at least the client's, which must exceed
    the thinking budget.
    """
    system, messages = from_neutral(chat_body.get("messages") or [])
    tools = chat_body.get("tools")
    if not tools:
        messages = [_without_tool_blocks(m) for m in messages]
    system, tools, messages = limit_breakpoints(system, tools, messages)
    sent: dict[str, Any] = {
        "model": chat_body.get("model"),
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": False,
    }
    client = body or {}
    thinking = client.get("thinking")
    if isinstance(thinking, dict) and client.get("model") == chat_body.get("model"):
        sent["thinking"] = thinking
        client_max = client.get("max_tokens")
        if isinstance(client_max, int) and client_max > max_tokens:
            sent["max_tokens"] = client_max
    if system:
        sent["system"] = system
    if tools:
        sent["tools"] = tools
        if chat_body.get("tool_choice") == "none":
            sent["tool_choice"] = {"type": "none"}
    return sent


def _without_tool_blocks(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blocks = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("tool_use", "server_tool_use"):
            call = f"[tool call {block.get('id')}] {block.get('name')}({block.get('input')})"
            blocks.append({"type": "text", "text": call})
        elif isinstance(kind, str) and kind.endswith("tool_result"):
            text = f"[tool result {block.get('tool_use_id')}] {content_text(block.get('content'))}"
            blocks.append({"type": "text", "text": text})
        else:
            blocks.append(block)
    return {**message, "content": blocks}


# -- tools ----------------------------------------------------------------------------------


def client_defines_tool(tools: Any) -> bool:
    """True when a client tool already has our tool's name: then we neither add nor answer."""
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("name") == EXTRACT_TOOL_NAME for t in tools
    )


def inject_tool(tools: Any) -> list[Any]:
    """The client's tools unchanged (custom and server tools), ours last: a stable prefix."""
    # A fresh copy each time (the caller may edit it); EXTRACT_TOOL is plain JSON, so a
    # round trip through orjson copies it, several times faster than copy.deepcopy.
    fresh = orjson.loads(orjson.dumps(EXTRACT_TOOL))
    return [*(tools if isinstance(tools, list) else ()), fresh]


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


def cache_ttl(body: JSON) -> str | None:
    """The cache lifetime ("5m" or "1h") of the request's last breakpoint, which covers its
    newest messages, those a compaction rewrites; None when it asks for no caching."""
    top = body.get("cache_control")  # automatic caching: a mark on the last block
    if isinstance(top, dict):
        return _ttl(top)
    messages = body.get("messages")
    for msg in reversed(messages if isinstance(messages, list) else []):
        content = msg.get("content") if isinstance(msg, dict) else None
        for block in reversed(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                inner = _last_mark(block["content"])
                if inner is not None:
                    return _ttl(inner)
            if isinstance(block.get("cache_control"), dict):
                return _ttl(block["cache_control"])
    for blocks in (body.get("system"), body.get("tools")):
        marks = list(_marks(blocks))
        if marks:
            return _ttl(marks[-1])
    return None


def _last_mark(blocks: list[Any]) -> dict[str, Any] | None:
    for block in reversed(blocks):
        if isinstance(block, dict) and isinstance(block.get("cache_control"), dict):
            mark: dict[str, Any] = block["cache_control"]
            return mark
    return None


def _ttl(mark: dict[str, Any]) -> str:
    return "1h" if mark.get("ttl") == "1h" else "5m"


def count_breakpoints(system: Any, tools: Any, messages: Sequence[Any]) -> int:
    """The `cache_control` breakpoints of a request: tools, system and message blocks."""
    return len(list(_marks(tools))) + len(list(_marks(system))) + _message_mark_count(messages)


def _message_mark_count(messages: Sequence[Any]) -> int:
    """How many marks `_message_breakpoints` finds, without a tuple each: every request
    counts them, and finds that nothing needs dropping."""
    count = 0
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if "cache_control" in block and isinstance(block["cache_control"], dict):
                count += 1
            if block.get("type") == "tool_result":
                nested = block.get("content")
                for inner in nested if isinstance(nested, list) else ():
                    if isinstance(inner, dict) and isinstance(inner.get("cache_control"), dict):
                        count += 1
    return count


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def limit_breakpoints(
    system: Any,
    tools: Any,
    messages: list[Any],
    limit: int = MAX_BREAKPOINTS,
    *,
    message_marks_at_most: int | None = None,
) -> tuple[Any, Any, list[Any]]:
    """(system, tools, messages) with at most `limit` breakpoints; the inputs are not edited.
    `message_marks_at_most`, if given, bounds the breakpoints in `messages`: when that many
    would fit, they are not counted.

    Dropped first: the earliest in `messages` (the newest mark the growing prefix); then,
    in prompt order, tools and system blocks, so the last system mark (the whole system,
    the summary block included) goes last. A later mark caches everything before it too.
    Changed blocks and messages are copies; the rest are the very same objects.
    """
    in_system = [i for i, b in enumerate(system) if _marked(b)] if isinstance(system, list) else []
    in_tools = [i for i, t in enumerate(tools) if _marked(t)] if isinstance(tools, list) else []
    others = len(in_system) + len(in_tools)
    if message_marks_at_most is not None and message_marks_at_most + others <= limit:
        return system, tools, messages
    excess = _message_mark_count(messages) + others - limit
    if excess <= 0:
        return system, tools, messages
    drop_messages = list(_message_breakpoints(messages))[:excess]
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


# -- errors ---------------------------------------------------------------------------------


def error_body(
    status: int, message: str, type_: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error in Anthropic's shape (`proxy.errors.anthropic_payload`; `code` has no place
    in it)."""
    return anthropic_payload(status, message, type_)
