"""proxy.session.turn_log: a session's turn records as text, decoded only when read."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction import economics
from proxy.compaction.economics import observed_hit_ratio
from proxy.session.state import SessionState
from proxy.session.turn_log import MAX_TURNS_KEPT, TRIM_SLACK, TurnLog, decode

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),  # newlines and quotes included: they stay inside their JSON strings
)
records = st.dictionaries(st.text(max_size=8), values, max_size=6)


def turn(n: int) -> dict[str, Any]:
    return {"at": float(n), "messages": n, "total_tokens": 10 * n, "compaction": "none"}


@given(st.lists(records, max_size=30), st.integers(1, 10), st.integers(0, 4), st.booleans())
def test_behaves_like_the_last_records_of_a_list(
    appended: list[dict[str, Any]], keep: int, slack: int, decode_midway: bool
) -> None:
    log, model = TurnLog(), []
    for n, record in enumerate(appended):
        if decode_midway and n == len(appended) // 2:
            assert log.records() == model  # a decoded log keeps its decoding up to date
            assert log.json() == orjson.dumps(log.text)  # and its JSON form, from here on
        log.append(record, keep=keep, slack=slack)
        model = [*model, record]
        if len(model) > keep + slack:  # trimmed all at once, not a record at a time
            model = model[-keep:]
        assert len(log) == len(model)
        assert log.json() == orjson.dumps(log.text)
    assert log.records() == model
    assert TurnLog(log.text).records() == model  # what the state stores reads back the same
    for n in (0, 1, 3, keep, keep + 2):
        assert log.last_lines(n) == (log.lines()[-n:] if n else [])
    assert "\n" not in "".join(orjson.dumps(r).decode() for r in model)


def test_append_keeps_the_last_300_and_never_decodes() -> None:
    log = TurnLog.of(turn(n) for n in range(MAX_TURNS_KEPT))
    assert log._decoded is None
    stored = log.json()
    for n in range(MAX_TURNS_KEPT, MAX_TURNS_KEPT + TRIM_SLACK):
        log.append(turn(n))
        # Until the slack is used up a turn only appends: the stored form keeps its beginning.
        assert log.json().startswith(stored[:-1]) and len(log) == n + 1
        stored = log.json()
    log.append(turn(MAX_TURNS_KEPT + TRIM_SLACK))  # then the oldest go, all at once
    assert log._decoded is None and len(log) == MAX_TURNS_KEPT
    first = TRIM_SLACK + 1
    assert [t["messages"] for t in log.records()] == list(range(first, first + MAX_TURNS_KEPT))
    assert log.json() == orjson.dumps(log.text)


def test_keep_last_and_the_empty_log() -> None:
    log = TurnLog.of(turn(n) for n in range(10))
    log.keep_last(3)
    assert [t["messages"] for t in log.records()] == [7, 8, 9]
    log.keep_last(0)
    assert len(log) == 0 and log.text == "" and log.records() == []
    assert TurnLog() == TurnLog("") and TurnLog.of([turn(1)]) != TurnLog()


def test_records_are_a_copy() -> None:
    log = TurnLog.of([turn(1)])
    log.records().append(turn(2))
    log.records()[0]["messages"] = 99
    assert log.records() == [turn(1)] and TurnLog(log.text).records() == [turn(1)]


def test_a_state_stores_its_turns_as_one_string_and_reads_the_old_list() -> None:
    state = SessionState()
    for n in range(3):
        state.turn_log.append(turn(n))
    stored = orjson.loads(state.to_bytes())
    assert stored["state_version"] == 3 and isinstance(stored["turn_log"], str)
    assert "turns" not in stored
    assert SessionState.from_bytes(state.to_bytes()) == state
    assert SessionState.from_bytes(state.to_bytes()).turns == [turn(n) for n in range(3)]

    # Saved by version 2: the records as a list under "turns".
    legacy = {**stored, "state_version": 2, "turns": [turn(n) for n in range(3)]}
    del legacy["turn_log"]
    upgraded = SessionState.from_dict(legacy)
    assert upgraded.turns == state.turns and upgraded.turn_log == state.turn_log


def test_a_damaged_line_costs_only_itself() -> None:
    text = "\n".join(
        [orjson.dumps(turn(1)).decode(), "{not json", "[1, 2]", orjson.dumps(turn(2)).decode()]
    )
    assert TurnLog(text).records() == [turn(1), turn(2)]


def _reference_hit_ratio(turns: list[dict[str, Any]], window: int) -> float | None:
    """`observed_hit_ratio` as it was written before it could read a `TurnLog` lazily."""
    recent: list[float] = []
    for i in range(len(turns) - 1, 0, -1):
        if turns[i - 1].get("compaction", "none") != "none":
            continue
        cached, prompt = turns[i].get("cached_tokens"), turns[i].get("prompt_tokens")
        if isinstance(cached, int) and isinstance(prompt, int) and prompt > 0:
            recent.append(min(1.0, cached / prompt))
            if len(recent) == window:
                break
    return sum(recent) / len(recent) if recent else None


usage = st.fixed_dictionaries(
    {},
    optional={
        "compaction": st.sampled_from(["none", "toolcall", "summary", 0, None]),
        "cached_tokens": st.one_of(st.none(), st.booleans(), st.integers(-2, 50), st.floats(0, 50)),
        "prompt_tokens": st.one_of(st.none(), st.integers(-2, 50), st.text(max_size=2)),
        "note": st.sampled_from(["cached_tokens", '"cached_tokens":3', "a\\b"]),
    },
)
damage = st.sampled_from(
    [
        "",
        "{",
        "[1, 2]",
        "null",
        '{"a": 1',
        "}",
        '{"cached_tokens": 5, "prompt_tokens": 10}',  # not as orjson writes it
        '{"cached_tokens":null,"cached_tokens":4,"prompt_tokens":10}',  # the last one wins
        '{"cached\\u005ftokens":5,"prompt_tokens":10}',  # the key spelled with an escape
        '{"x":{"cached_tokens":5},"cached_tokens":null,"prompt_tokens":10}',
    ]
)


@given(st.lists(st.one_of(usage, usage, damage), max_size=40), st.integers(0, 10), st.booleans())
def test_the_lazy_hit_ratio_agrees_with_reading_every_record(
    lines: list[Any], window: int, decoded: bool
) -> None:
    """Reading the stored lines from the end, decoding only those that can count, gives what
    decoding every record gives, damaged and oddly written lines included."""
    text = "\n".join(x if isinstance(x, str) else orjson.dumps(x).decode() for x in lines)
    log = TurnLog(text)
    if decoded:
        log.records()
    expected = _reference_hit_ratio(TurnLog(text).records(), window)
    assert observed_hit_ratio(log, window) == expected
    assert observed_hit_ratio(TurnLog(text).records(), window) == expected


@pytest.mark.parametrize(("cached", "decoded"), [(5, 9), (None, 0)])
def test_the_hit_ratio_decodes_only_the_turns_it_reads(
    monkeypatch: pytest.MonkeyPatch, cached: int | None, decoded: int
) -> None:
    """An upstream that reports cached tokens: the newest 8 turns and the predecessor of the
    oldest of them; one that never does: none at all."""
    log = TurnLog.of({**turn(n), "prompt_tokens": 10, "cached_tokens": cached} for n in range(300))
    read: list[str] = []
    monkeypatch.setattr(economics, "decode", lambda line: read.append(line) or decode(line))
    assert observed_hit_ratio(log) == (None if cached is None else 0.5)
    assert len(read) == decoded
    assert log._decoded is None


def test_the_count_follows_appends_and_cuts() -> None:
    log = TurnLog()
    for n in range(7):
        log.append({"n": n}, keep=5, slack=0)
        assert len(log) == min(n + 1, 5) == log.text.count("\n") + 1
    log.keep_last(2)
    assert len(log) == 2 and [r["n"] for r in log.records()] == [5, 6]
    assert len(TurnLog(log.text)) == 2
    log.keep_last(0)
    assert len(log) == 0 and log.text == ""


def _log_end(stored: bytes) -> int:
    """Where the turn log's JSON string ends (its closing quote) in a stored state."""
    return stored.index(b',"state_version":') - 1


def test_consecutive_saves_of_a_state_begin_alike() -> None:
    """The stored form puts the view and the turn log, which turns only append to, before
    the fields that change every turn: a turn's save repeats the one before up to what it
    appended (what lets a store rewrite only the pages at the end)."""
    state = SessionState()
    messages = [{"role": "user", "content": f'message {n} "quoted"\n'} for n in range(40)]
    state.set_view(messages)
    for n in range(MAX_TURNS_KEPT + 10):
        state.turn_log.append({**turn(n), "note": 'a "quote" and a \\ backslash'})
    state.total_tokens = 999
    before = state.to_bytes()

    # The same messages again, a turn record more: all up to the log's end is kept.
    state.turn_log.append(turn(1000))
    state.total_tokens = 10_000  # a small field that grows by a digit
    after = state.to_bytes()
    assert after[: _log_end(before)] == before[: _log_end(before)]
    assert orjson.loads(after) == state.to_dict() and SessionState.from_bytes(after) == state

    # A message more: the view gains a chunk; the chunks before it are kept.
    state.set_view([*messages, {"role": "assistant", "content": "more"}], valid=len(messages))
    grown = state.to_bytes()
    view_end = after.index(b'],"turn_log":')
    assert grown[:view_end] == after[:view_end] and len(state.view or []) == 2
    assert SessionState.from_bytes(grown) == state
