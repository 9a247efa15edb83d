"""Converting a Messages or Responses history on from the session's last request's conversion
(`proxy.wire.neutral_reuse`) gives what converting it whole gives, and is used only when the
history resends the last one's as it was."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.errors import InvalidRequest
from proxy.session.history import UnrecognisedHistory
from proxy.session.json_limits import Written, compaction_blocker
from proxy.wire.messages.adapter import MessagesWire
from proxy.wire.messages.checks import checked, request_error
from proxy.wire.messages.to_neutral import convert, to_neutral
from proxy.wire.neutral_reuse import NeutralReuse
from proxy.wire.responses.adapter import ResponsesWire
from proxy.wire.responses.to_neutral import convert as convert_items
from proxy.wire.responses.to_neutral import items_to_messages
from tests.wire.messages.messages_cases import requests, session
from tests.wire.responses.test_responses_items import fc, fco, histories

WIRE = MessagesWire()


def body_of(system: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """As the proxy parses it: a fresh copy of every message."""
    body = {"model": "claude", "messages": copy.deepcopy(messages)}
    if system is not None:
        body["system"] = copy.deepcopy(system)
    return body


def reuse_messages(reuse: NeutralReuse, body: dict[str, Any], session_id: str = "s") -> Any:
    raw = orjson.dumps(body)
    _, written = compaction_blocker(raw, body, "messages")
    return received_checked(WIRE, *reuse.messages(session_id, WIRE, body, written))


def received_checked(wire: Any, neutral: list[dict[str, Any]], received: Written | None) -> Any:
    """The neutral messages, once what the prefix hash reads of them, as the reuse wrote it,
    is found to be what writing it whole gives."""
    assert received is not None and received.holds(wire.as_received(neutral))
    assert received.history_json == orjson.dumps(wire.as_received(neutral))
    return neutral


Cut = tuple[Any, list[dict[str, Any]], int]


@st.composite
def cut_requests(draw: st.DrawFn, tails: list[dict[str, Any]] | None = None) -> Cut:
    """A generated request (`system`, `messages`), now and then one of `tails` added, and
    where a first request of the same session ended (1 to all its messages)."""
    system, messages = draw(requests())
    if tails and draw(st.booleans()):
        messages = [*messages, draw(st.sampled_from(tails))]
    return system, messages, draw(st.integers(1, len(messages)))


@settings(max_examples=150, deadline=None)
@given(cut_requests())
def test_going_on_from_a_first_part_gives_the_whole_conversion(request: Cut) -> None:
    system, messages, cut = request
    try:
        whole = to_neutral(system, messages)
    except UnrecognisedHistory:
        return
    before = convert(system, messages[:cut])
    kept = copy.deepcopy(before.neutral)
    assert convert(system, messages, before).neutral == whole
    assert before.neutral == kept  # the earlier conversion is left as it was


def test_an_assistant_message_after_an_assistant_end_joins_its_turn() -> None:
    first = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "part one"}]
    more = [*first, {"role": "assistant", "content": "part two"}]
    went_on = convert("sys", more, convert("sys", first)).neutral
    assert went_on == to_neutral("sys", more)
    assert went_on[-1]["content"] == "part one\npart two"


def test_the_session_reuse_converts_only_what_a_history_adds() -> None:
    reuse = NeutralReuse()
    history = session()
    turns = [history[:n] for n in range(3, len(history) + 1)]
    for n, messages in enumerate(turns):
        body = body_of("You code.", messages)
        assert reuse_messages(reuse, body) == to_neutral("You code.", body["messages"])
        assert reuse.reused == n  # every turn after the first went on from the one before

    # Not from another session, another system, or a history edited before its end.
    body = body_of("You code.", history)
    assert reuse_messages(reuse, body, "other") == to_neutral("You code.", history)
    assert reuse.reused == len(turns) - 1
    reuse_messages(reuse, body_of("You code.", history))
    assert reuse_messages(reuse, body_of("Other.", history)) == to_neutral("Other.", history)
    edited = copy.deepcopy(history)
    edited[0]["content"][0]["text"] = "Fix the bug in b.py"
    count = reuse.reused
    assert reuse_messages(reuse, body_of("You code.", edited)) == to_neutral("You code.", edited)
    assert reuse.reused == count


def test_the_sessions_kept_are_bounded_by_bytes_in_all() -> None:
    """Sessions past the byte budget are forgotten, the least recent first; a forgotten
    session converts its next request whole, and gives the same messages."""
    history = session()
    size = len(orjson.dumps(body_of("You code.", history)["messages"]))
    reuse = NeutralReuse(max_bytes=2 * size + size // 2)  # room for two of them
    for name in ("a", "b", "c"):
        reuse_messages(reuse, body_of("You code.", history), name)
    count = reuse.reused
    assert reuse_messages(reuse, body_of("You code.", history), "a") == to_neutral(
        "You code.", history
    )
    assert reuse.reused == count  # "a" went first: converted whole
    reuse_messages(reuse, body_of("You code.", history), "c")
    assert reuse.reused == count + 1  # "c" was kept


def test_what_a_request_does_to_its_list_stays_its_own() -> None:
    reuse = NeutralReuse()
    history = session()
    got = reuse_messages(reuse, body_of(None, history[:3]))
    got.clear()
    again = reuse_messages(reuse, body_of(None, history))
    assert again == to_neutral(None, history) and reuse.reused == 1


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_responses_going_on_from_a_closed_first_part_gives_the_whole_conversion(
    items: list[dict[str, Any]], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, max(1, len(items))))
    try:
        whole = items_to_messages(items)
    except UnrecognisedHistory:
        return
    before = convert_items(items[:cut])
    kept = copy.deepcopy(before.neutral)
    went_on = convert_items(items, before).neutral
    assert went_on == whole
    assert before.neutral == kept


def test_responses_never_go_on_from_an_open_assistant_message() -> None:
    reasoning = {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "x"}
    first = [{"role": "user", "content": "go"}, reasoning]
    assert not convert_items(first).closed  # the call that follows joins that message
    items = [*first, fc("c1"), fco("c1")]
    assert convert_items(items, convert_items(first)).neutral == items_to_messages(items)


def test_the_session_reuse_goes_on_for_codex_histories() -> None:
    reuse = NeutralReuse()
    wire = ResponsesWire()
    items: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    for n in range(4):
        items = [*items, fc(f"c{n}"), fco(f"c{n}", f"out {n}")]
        body = {"model": "gpt-5", "input": copy.deepcopy(items), "store": False}
        _, written = compaction_blocker(orjson.dumps(body), body, "input")
        neutral = received_checked(wire, *reuse.messages("s", wire, body, written))
        assert neutral == items_to_messages(body["input"])
        assert reuse.reused == n


# A message Anthropic would refuse after a first part it accepted, of each kind the check knows.
_BAD_TAILS: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_none"}]},
    {"role": "user", "content": [{"text": "a block without a type"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": 7, "name": "Read"}]},
    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    {"role": "tool", "content": "no such role"},
    {"role": "user", "content": 3},
]


@settings(max_examples=150, deadline=None)
@given(cut_requests(_BAD_TAILS))
def test_checking_on_from_a_first_part_gives_the_whole_verdict(request: Cut) -> None:
    system, messages, cut = request
    first = checked(body_of(system, messages[:cut]))
    if first is None:
        return  # a first part not plainly valid keeps nothing to go on from
    whole = body_of(system, messages)
    assert checked(whole, first) == checked(whole)


def test_a_refusal_after_a_reused_first_part_is_the_one_a_whole_check_gives() -> None:
    reuse = NeutralReuse()
    history = session()
    reuse_messages(reuse, body_of("You code.", history))
    bad = body_of("You code.", [*history, *_BAD_TAILS[:1]])
    with pytest.raises(InvalidRequest) as refused:
        reuse_messages(reuse, bad)
    assert reuse.reused == 1  # it went on from the first request
    assert str(refused.value.message) == request_error(body_of("You code.", bad["messages"]))


@settings(max_examples=100, deadline=None)
@given(cut_requests())
def test_what_the_prefix_hash_reads_is_written_on_from_the_last_request(request: Cut) -> None:
    system, messages, cut = request
    reuse = NeutralReuse()
    try:
        to_neutral(system, messages)
        reuse_messages(reuse, body_of(system, messages[:cut]))
    except UnrecognisedHistory:
        return
    neutral = reuse_messages(reuse, body_of(system, messages))  # checks the bytes
    assert neutral == to_neutral(system, messages)
