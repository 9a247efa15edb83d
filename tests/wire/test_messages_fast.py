"""The Messages wire's fast paths agree with its plain reference ones, on any input.

`to_neutral` (one pass) against the reference in `messages_reference`: the same neutral
messages, key order and shared objects included, or the same error; `plainly_valid` says yes
exactly when `check_request` finds nothing; the breakpoint count matches the positions.
Inputs are valid requests, the same with one fault put in, and JSON made of near misses.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire.messages_checks import MalformedRequest, check_request, plainly_valid
from proxy.wire.messages_neutral import to_neutral
from proxy.wire.messages_request import (
    EXTRACT_TOOL,
    _message_breakpoints,
    _message_mark_count,
    inject_tool,
)

from . import messages_reference as reference
from .messages_cases import requests, session

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


@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_one_pass_conversion_is_the_reference_one(history: tuple[Any, Any]) -> None:
    system, messages = history
    before = orjson.dumps(history)
    fast = outcome(to_neutral, system, messages)
    slow = outcome(reference.to_neutral, system, messages)
    inputs = containers(history, set())
    assert structure(fast, inputs, {}) == structure(slow, inputs, {})
    assert orjson.dumps(history) == before  # nothing edited in place


def use(call_id: Any = "toolu_0", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Read", "input": {"q": 1}, **extra}


def result(call_id: Any = "toolu_0", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, **extra}


def turn(*blocks: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "go"}, {"role": "assistant", "content": list(blocks)}]


TYPELESS = {"text": "no type"}
EDGES: list[tuple[Any, Any]] = [
    # Faults of one message: a block without a type outranks the message's other faults.
    (None, turn(use(None), TYPELESS)),
    (None, turn(use(), use("toolu_1", name=3))),
    (None, [*turn(use()), {"role": "user", "content": [result("toolu_9"), TYPELESS]}]),
    (None, [*turn(use()), {"role": "user", "content": [result(), 7]}]),
    (None, [*turn(use()), {"role": "user", "content": None}]),
    (None, [*turn(use()), {"role": "user"}]),
    (None, [{"role": "tool", "content": [TYPELESS]}]),
    (None, [{"role": "tool", "content": "x"}]),
    (None, [{"role": "system", "content": [TYPELESS]}]),
    (None, [*turn(use()), {"role": "assistant", "content": [TYPELESS]}]),
    ([{"type": "text", "text": "s"}, "x"], turn()),
    # Shapes the fast path converts itself or hands to the general one.
    ("", [{"role": "assistant", "content": ""}, {"role": "assistant", "content": "a"}]),
    (None, turn({"type": "text", "text": "a"}, {"type": "text", "text": 2}, {"type": "text"})),
    (None, turn({"type": "thinking", "thinking": 1}, {"type": "thinking", "thinking": "t"})),
    (None, turn({"type": "tool_use", "id": "toolu_0", "name": "Read"})),
    (None, turn(use(input={"n": 2**70}))),
    (None, [*turn(use(), use("toolu_1")), {"role": "user", "content": [result("toolu_1")]}]),
    (
        None,
        [
            *turn(use()),
            {"role": "assistant", "content": [use("toolu_1")]},
            {
                "content": [
                    {"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}},
                    result("toolu_1", content=None),
                    {"type": "image", "source": {"type": "base64", "media_type": "a", "data": "b"}},
                    result("toolu_0", content=[{"type": "text", "text": "r"}, "s", {"type": 1}]),
                ],
                "role": "user",
                "id": "m",
            },
        ],
    ),
    (None, [*turn(use()), {"role": "user", "content": [result(content={"a": 1})]}]),
    (None, [*turn(use()), {"role": "user", "content": [result(content=3)]}]),
    (None, [*turn(use()), {"role": "user", "content": []}]),
    (
        None,
        [*turn(use()), {"role": "user", "content": "ok"}, {"role": "user", "content": [result()]}],
    ),
    (
        None,
        [*turn(use()), {"role": "system", "content": "s"}, {"role": "user", "content": [result()]}],
    ),
    (None, [{"role": "system", "content": [{"type": "image", "source": {"type": "url"}}]}]),
    # Near misses of the request check.
    (None, turn(use(input=[1]))),
    (None, turn(use(input=None))),
    (None, [{"role": "user", "content": [use()]}, {"role": "user", "content": [use(input=3)]}]),
    (None, turn(use(), result())),
    (None, [*turn(use()), {"role": "system", "content": [result()]}]),
    (None, [*turn(use()), {"role": "user", "content": [result(content=[{"text": "t"}])]}]),
    (None, [*turn(use()), {"role": "user", "content": [result(content=["t"])]}]),
    ([{"type": "image"}], turn()),
    ([{"type": "text", "text": None}], turn()),
    (None, []),
]


@pytest.mark.parametrize(("system", "messages"), EDGES)
def test_edges_convert_as_the_reference_does(system: Any, messages: Any) -> None:
    fast = outcome(to_neutral, system, messages)
    inputs = containers((system, messages), set())
    assert structure(fast, inputs, {}) == structure(
        outcome(reference.to_neutral, system, messages), inputs, {}
    )


@pytest.mark.parametrize(("system", "messages"), EDGES)
def test_edges_are_checked_as_the_reference_checks(system: Any, messages: Any) -> None:
    body = {
        "model": "claude",
        "messages": messages,
        **({} if system is None else {"system": system}),
    }
    assert plainly_valid(body) == (reference_error(body) is None)


@settings(max_examples=400, deadline=None)
@given(histories(), st.integers(0, 9))
def test_the_fast_check_says_yes_exactly_when_the_reference_finds_nothing(
    history: tuple[Any, Any], shape: int
) -> None:
    system, messages = history
    body: Any = {"model": "claude", "max_tokens": 1, "messages": messages}
    if system is not None:
        body["system"] = system
    if shape == 0:
        body = messages  # not an object
    assert plainly_valid(body) == (reference_error(body) is None)


@settings(max_examples=200, deadline=None)
@given(histories())
def test_the_breakpoint_count_is_the_number_of_positions(history: tuple[Any, Any]) -> None:
    _, messages = history
    if isinstance(messages, list):
        assert _message_mark_count(messages) == len(list(_message_breakpoints(messages)))


def test_a_claude_code_session_takes_the_fast_paths() -> None:
    msgs = session()
    assert plainly_valid({"model": "claude", "messages": msgs})
    assert structure(to_neutral(None, msgs), containers(msgs, set()), {}) == structure(
        reference.to_neutral(None, msgs), containers(msgs, set()), {}
    )


def test_every_injected_tool_is_a_fresh_copy() -> None:
    first, second = inject_tool(None)[-1], inject_tool([])[-1]
    assert first == second == copy.deepcopy(EXTRACT_TOOL)
    assert first is not EXTRACT_TOOL and first is not second
    assert first["input_schema"] is not EXTRACT_TOOL["input_schema"]
    assert orjson.dumps(first) == orjson.dumps(EXTRACT_TOOL)
