"""Inputs for holding the Messages wire's fast paths to its references, and the comparison.

`histories`: (system, messages) that are valid, valid with one or two faults put in, or
near-miss JSON throughout; `neutral_histories`: neutral messages of valid requests with the
edits the core makes (cuts, placeholders, rewritten text, hidden extract calls, messages of
its own) and some it never makes. `structure` compares outputs with identity: the input's own
objects are named by identity, new objects shared between places are noted as such.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from proxy.wire.messages.checks import MalformedRequest, check_request
from proxy.wire.messages.to_neutral import X_FIRST, X_GROUP, X_ITEMS

from . import messages_reference as reference
from .messages_cases import requests, tool_use

short_text = st.text(max_size=4)
junk = st.sampled_from([None, 0, 2, True, [], {}, "x"])
call_ids = st.sampled_from(["toolu_0", "toolu_1", "toolu_2", "a"])
mark = st.sampled_from([{"type": "ephemeral"}, "ephemeral", None])


@st.composite
def fields(draw: st.DrawFn, wanted: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """Each field present with a good value (mostly), a bad one, or absent; in any order."""
    out: dict[str, Any] = {}
    for key, good in wanted.items():
        choice = draw(st.integers(0, 11))
        if choice < 10:
            out[key] = draw(good)
        elif choice == 10:
            out[key] = draw(junk)
    keys = draw(st.permutations(list(out)))
    return {k: out[k] for k in keys}


inner_block = st.one_of(
    fields({"type": st.just("text"), "text": short_text, "cache_control": mark}),
    fields({"type": st.sampled_from(["image", "document"]), "source": st.just({"type": "url"})}),
    junk,
)
BLOCKS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "text": {"text": short_text},
    "thinking": {"thinking": short_text, "signature": short_text},
    "redacted_thinking": {"data": short_text},
    "tool_use": {"id": call_ids, "name": short_text, "input": st.just({"q": 1})},
    "tool_result": {
        "tool_use_id": call_ids,
        "content": st.one_of(short_text, st.lists(inner_block, max_size=2)),
        "is_error": st.booleans(),
    },
    "image": {
        "source": st.sampled_from(
            [
                {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                {"type": "url", "url": "https://example.com/a.png"},
                {"type": "file", "file_id": "f"},
            ]
        )
    },
    "search_result": {"content": st.just([])},
}


@st.composite
def block(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from([*BLOCKS, "none"]))
    if kind == "none":
        return draw(st.one_of(junk, fields({"type": junk, "text": short_text})))
    return draw(fields({"type": st.just(kind), **BLOCKS[kind], "cache_control": mark}))


@st.composite
def message(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 19)) == 0:
        return draw(junk)
    role = draw(st.sampled_from(["user", "user", "assistant", "assistant", "system", "tool", 1]))
    content = st.one_of(short_text, st.lists(block(), max_size=3), junk)
    return draw(fields({"role": st.just(role), "content": content, "name": short_text}))


system_strategy = st.one_of(
    st.none(),
    short_text,
    st.lists(fields({"type": st.just("text"), "text": short_text, "cache_control": mark})),
    junk,
)


@st.composite
def histories(draw: st.DrawFn) -> tuple[Any, Any]:
    """(system, messages): valid, valid with one or two faults put in, or near misses."""
    choice = draw(st.integers(0, 3))
    if choice == 3:
        return draw(system_strategy), draw(st.one_of(st.lists(message(), max_size=6), junk))
    system, messages = copy.deepcopy(draw(requests()))
    for _ in range(choice):
        put_fault(draw, messages)
    return system, messages


def put_fault(draw: st.DrawFn, messages: list[Any]) -> None:
    """One field of a message or block (nested ones too) dropped or made junk, or a block or
    message swapped for an arbitrary one."""
    places: list[dict[str, Any]] = []
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        places += [msg] if isinstance(msg, dict) else []
        for item in content if isinstance(content, list) else ():
            inner = item.get("content") if isinstance(item, dict) else None
            places += [item] if isinstance(item, dict) else []
            places += [b for b in inner if isinstance(b, dict)] if isinstance(inner, list) else []
    fault = draw(st.integers(0, 5))
    target = draw(st.sampled_from(places)) if places and fault < 3 else {}
    if target:
        key = draw(st.sampled_from(sorted(target)))
        if fault == 0:
            del target[key]
        else:
            target[key] = draw(junk)
        return
    k = draw(st.integers(0, len(messages) - 1))
    content = messages[k].get("content") if isinstance(messages[k], dict) else None
    if fault == 3 and isinstance(content, list) and content:
        content[draw(st.integers(0, len(content) - 1))] = draw(block())
    else:
        messages[k : k + (fault == 4)] = [draw(message())]


def outcome(convert: Any, system: Any, messages: Any) -> Any:
    """The neutral messages, or the error raised: its type and message."""
    try:
        return convert(system, messages)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def reference_error(body: Any) -> str | None:
    try:
        check_request(body)
    except MalformedRequest as exc:
        return str(exc)
    return None


def structure(value: Any, inputs: set[int], seen: dict[int, int]) -> Any:
    """`value` with the input's own objects named by identity and new ones shared noted."""
    if isinstance(value, dict | list):
        if id(value) in inputs:
            return ("input", id(value))
        if id(value) in seen:
            return ("again", seen[id(value)])
        seen[id(value)] = len(seen)
        if isinstance(value, dict):
            return [(k, structure(v, inputs, seen)) for k, v in value.items()]
        return [structure(v, inputs, seen) for v in value]
    return (type(value).__name__, value)


def containers(value: Any, found: set[int]) -> set[int]:
    if isinstance(value, dict | list):
        found.add(id(value))
    if isinstance(value, dict | list | tuple):
        for v in value.values() if isinstance(value, dict) else value:
            containers(v, found)
    return found


EXTRACT_CALL = {
    "id": "toolu_x1",
    "type": "function",
    "function": {"name": "extract_compacted_tool_result", "arguments": '{"toolcall_id":"t"}'},
}


def calls_of(msg: dict[str, Any]) -> list[Any]:
    calls = msg.get("tool_calls")
    return calls if isinstance(calls, list) else []


def edit(draw: st.DrawFn, neutral: list[dict[str, Any]]) -> None:
    """One edit of the core's (or one it never makes), the edited messages copies."""
    kind = draw(st.integers(0, 7))
    roles = {0: None, 1: "tool", 2: "any", 3: "assistant", 4: None, 5: "any", 6: "any"}
    wanted = roles.get(kind, "assistant")
    places = [i for i, m in enumerate(neutral) if wanted in ("any", m.get("role"))]
    k = draw(st.sampled_from(places)) if places else 0
    msg = neutral[k] if places else {}
    if kind == 0 and neutral:  # a summary cut (the leading system message may stay)
        keep = 1 if neutral[0].get("role") == "system" and draw(st.booleans()) else 0
        del neutral[keep : max(keep, draw(st.integers(0, len(neutral))))]
    elif kind == 1 and msg:  # a level-1 placeholder
        neutral[k] = {**msg, "content": f"[Compacted, ID: {msg.get('tool_call_id')}]"}
    elif kind == 2 and msg:  # rewritten content
        content = draw(st.one_of(st.none(), short_text, st.just([{"type": "text", "text": "p"}])))
        neutral[k] = {**msg, "content": content}
    elif kind == 3 and msg:  # a hidden extract call and its answer
        neutral[k] = {**msg, "tool_calls": [*calls_of(msg), EXTRACT_CALL]}
        answer = {"role": "tool", "tool_call_id": EXTRACT_CALL["id"], "content": "out"}
        neutral.insert(k + 1, answer)
    elif kind == 4:  # a message of the core's own, without originals
        own = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
        new: dict[str, Any] = {"role": own, "content": draw(short_text)}
        if own == "assistant" and draw(st.booleans()):
            new["tool_calls"] = [EXTRACT_CALL]
        if own == "tool":
            new["tool_call_id"] = draw(call_ids)
        neutral.insert(draw(st.integers(0, len(neutral))), new)
    elif kind == 5 and msg:  # a message dropped
        del neutral[k]
    elif kind == 6 and msg:  # private keys lost or changed (the core never does this)
        key = draw(st.sampled_from([X_ITEMS, X_GROUP, X_FIRST, "tool_calls", "role"]))
        neutral[k] = {**msg, key: draw(st.one_of(junk, st.just([tool_use("toolu_0")])))}
        if draw(st.booleans()):
            del neutral[k][key]
    elif kind == 7 and msg:  # a call with no block of its own, or junk among the calls
        extra = draw(st.one_of(junk, st.just({**EXTRACT_CALL, "id": "toolu_x2"})))
        neutral[k] = {**msg, "tool_calls": [*calls_of(msg), extra]}


@st.composite
def neutral_histories(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    request = draw(requests())
    neutral = reference.to_neutral(*request)
    for _ in range(draw(st.integers(0, 4))):
        edit(draw, neutral)
    return request, neutral
