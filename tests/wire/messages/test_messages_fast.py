"""The Messages wire's fast paths agree with its plain reference ones, on any input.

`to_neutral` (one pass) and `from_neutral` against the references in `messages_reference`:
the same output, key order and shared objects included, or the same error; `plainly_valid`
says yes exactly when `check_request` finds nothing; the breakpoint count matches the
positions. Generated inputs (`messages_fuzz`) and tables of the edge cases.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire.messages.bodies import (
    EXTRACT_TOOL,
    _message_breakpoints,
    _message_mark_count,
    inject_tool,
)
from proxy.wire.messages.checks import plainly_valid
from proxy.wire.messages.from_neutral import from_neutral
from proxy.wire.messages.to_neutral import X_ITEMS, to_neutral

from . import messages_reference as reference
from .messages_cases import session
from .messages_fuzz import (
    containers,
    histories,
    neutral_histories,
    outcome,
    reference_error,
    structure,
)


@settings(max_examples=150, deadline=None)
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


@settings(max_examples=150, deadline=None)
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


@settings(max_examples=150, deadline=None)
@given(neutral_histories())
def test_the_way_back_is_the_reference_one(history: tuple[Any, list[dict[str, Any]]]) -> None:
    _, neutral = history
    before = orjson.dumps(history, default=repr)
    fast = outcome(lambda _, messages: from_neutral(messages), None, neutral)
    slow = outcome(lambda _, messages: reference.from_neutral(messages), None, neutral)
    inputs = containers(history, set())
    assert structure(fast, inputs, {}) == structure(slow, inputs, {})
    assert orjson.dumps(history, default=repr) == before  # nothing edited in place


def grouped() -> list[dict[str, Any]]:
    """A turn whose user message holds a result and text: a tool message and a user one."""
    return to_neutral(None, [*turn(use()), {"role": "user", "content": [result(), TYPELESS_TEXT]}])


TYPELESS_TEXT = {"type": "text", "text": "and this"}
CALL = {"id": "toolu_0", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
NOT_ASSISTANT = {"role": "user", "content": [use(), {"type": "text", "text": "t"}]}
FROM_EDGES: list[list[Any]] = [
    # An original that is not an assistant message: its tool_use blocks are not its calls.
    [{"role": "assistant", "content": "t", "tool_calls": [CALL], X_ITEMS: [NOT_ASSISTANT]}],
    [{"role": "assistant", "content": "t", X_ITEMS: [NOT_ASSISTANT]}],
    # Two user messages in one group: the first one's envelope is taken.
    [*grouped(), {**grouped()[-1], "content": [{"type": "text", "text": "other"}]}],
    [*grouped()[:-1], {**grouped()[-1], "content": "edited"}],
    # Envelopes without content, or none at all.
    [*grouped()[:2], {**grouped()[2], "x_envelope": {"role": "user"}}],
    [*grouped()[:2], {**grouped()[2], "x_envelope": None}],
    # Calls that are not a list, or not objects.
    [{**grouped()[1], "tool_calls": "ab"}],
    [{**grouped()[1], "tool_calls": 3}],
    [{**grouped()[1], "tool_calls": [{"id": ["unhashable"]}]}],
    # A run of two originals, and none.
    [{**grouped()[1], X_ITEMS: [grouped()[1][X_ITEMS][0], {"role": "assistant", "content": "b"}]}],
    [{**grouped()[1], X_ITEMS: []}],
    [{"role": "assistant", "content": None, X_ITEMS: "x"}],
]


@pytest.mark.parametrize("neutral", FROM_EDGES)
def test_edges_come_back_as_the_reference_brings_them(neutral: list[Any]) -> None:
    inputs = containers(neutral, set())
    fast = outcome(lambda _, messages: from_neutral(messages), None, neutral)
    slow = outcome(lambda _, messages: reference.from_neutral(messages), None, neutral)
    assert structure(fast, inputs, {}) == structure(slow, inputs, {})


@settings(max_examples=100, deadline=None)
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
