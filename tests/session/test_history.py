"""proxy.session.history.validate from a start: a prefix checked before is not checked again,
and the answer is the one a check of the whole history gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.session.history import UnrecognisedHistory, validate

ID = st.sampled_from(["a", "b", "c"])
CALLS = st.one_of(st.none(), st.just("x"), st.lists(st.fixed_dictionaries({"id": ID}), max_size=2))
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "function", "bogus"])}),
    st.fixed_dictionaries({"role": st.just("assistant"), "tool_calls": CALLS}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": ID}),
    st.just("not a message"),
)


def accepted(messages: list[Any], start: int = 0) -> bool:
    try:
        validate(messages, start)
    except UnrecognisedHistory:
        return False
    return True


@given(st.lists(MESSAGE, max_size=10), st.data())
def test_a_checked_prefix_gives_the_whole_check(messages: list[Any], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(messages)))
    if accepted(messages[:start]):
        assert accepted(messages, start) == accepted(messages)


def test_the_calls_a_prefix_leaves_open_are_read_from_it() -> None:
    history = [
        {"role": "user"},
        {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a"},
        {"role": "tool", "tool_call_id": "b"},
    ]
    assert accepted(history, 3) and accepted(history, 4)
    assert not accepted([*history[:3], {"role": "tool", "tool_call_id": "z"}], 3)
    assert not accepted([{"role": "user"}, {"role": "tool", "tool_call_id": "a"}], 1)
