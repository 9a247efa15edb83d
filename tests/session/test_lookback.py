"""Looking back without an id (issue 35, item 1): what a search covers, its hits, paged reads,
and searches that re-derive to the same bytes on later requests."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.conversation_message import RawOpenAIMessage
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, answer_call
from proxy.session.hidden_rounds import Answered, round_entry
from proxy.session.history import HIDDEN_KEY_PREFIX
from proxy.session.lookback import (
    ANSWER_CHARS,
    MAX_HITS,
    MAX_SCAN_CHARS,
    PAGE_CHARS,
    Item,
    Lookback,
    lookback_of,
    page,
    search,
    searchable,
)
from proxy.session.rebuild import apply_compaction, rebuild, record_turn
from proxy.session.state import SessionState, add_hidden, add_round
from proxy.wire.chat.adapter import ChatWire

WIRE = ChatWire()


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": orjson.dumps(arguments).decode()}
    return {"id": call_id, "type": "function", "function": function}


def _turn(n: int) -> list[dict[str, Any]]:
    """One user turn: the user asks, the assistant answers and reads a file."""
    return [
        {"role": "user", "content": f"Turn {n}: please look at UserLiteral{n} " + "u" * 300},
        {
            "role": "assistant",
            "content": f"I will read it. AssistantLiteral{n} " + "a" * 300,
            "tool_calls": [_call(f"c{n}", "read_file", {"path": f"src/PathLiteral{n}.py"})],
        },
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"ToolLiteral{n} " + "t" * 2000},
    ]


def _history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for n in range(1, turns + 1):
        msgs += _turn(n)
    return msgs


def _summarised(msgs: list[dict[str, Any]], keep: int = 4) -> SessionState:
    """The state after a summary that keeps the last `keep` messages, and level 1 before it."""
    rb = rebuild(msgs, None, unmerge=WIRE.unmerge)
    rb.conversation.compact_toolcall(keep_max=1)
    rb.conversation.compact(lambda m: "SUMMARY", keep_recent=keep)
    apply_compaction(rb)
    return SessionState.from_bytes(record_turn(rb, total_tokens=1000).to_bytes())


def _extract(call_id: str, **arguments: Any) -> dict[str, Any]:
    return _call(call_id, EXTRACT_TOOL_NAME, arguments)


def test_a_search_covers_what_a_summary_cut_and_what_was_reclaimed() -> None:
    msgs = _history(6)
    state = _summarised(msgs)
    rb = rebuild(msgs, state, unmerge=WIRE.unmerge)
    assert rb.state.summary and rb.state.cut > 1
    items = searchable(rb)
    ids = {item.id for item in items}
    # Cut: turn 1's user and assistant messages, its tool call and its tool result.
    assert {"msg:1", "msg:2", "call:c1", "c1"} <= ids
    first = {item.id: item for item in items}
    assert (first["msg:1"].turn, first["msg:1"].who) == (1, "user")
    assert (first["msg:2"].turn, first["msg:2"].who) == (1, "assistant")
    assert (first["call:c1"].who, first["c1"].who) == ("read_file", "read_file")
    assert "PathLiteral1" in first["call:c1"].text
    # Not searched: the client's system prompt, and the messages the upstream still gets whole.
    assert "msg:0" not in ids
    sent = orjson.dumps(rb.upstream_messages()).decode()
    for item in items:
        if item.id.startswith("msg:"):
            assert item.text not in sent
    assert not any(item.index >= len(msgs) - 1 for item in items)


def test_search_is_literal_in_any_case_newest_first_and_bounded() -> None:
    items = [
        Item(f"k{n}", n, "read_file", f"prefix {n} Needle.Case[1] suffix", n) for n in range(30)
    ]
    found = search("needle.CASE[1]", items)
    lines = found.text.splitlines()
    assert len(lines) == 1 + MAX_HITS
    assert lines[1].startswith("- k29 (turn 29, read_file): ") and "Needle.Case[1]" in lines[1]
    assert lines[-1].startswith("- k10 ")
    assert found.scope == {"hits": [f"k{n}" for n in range(29, 9, -1)], "partial": False}
    assert search("no such thing", items).text == (
        "No match for 'no such thing' in the compacted history."
    )


def test_a_hit_shows_about_300_characters_around_the_match() -> None:
    text = "x" * 5000 + "TheLiteral" + "y" * 5000
    hit = search("theliteral", [Item("k", 1, "tool", text, 3)]).text.splitlines()[1]
    shown = hit.split(": ", 1)[1]
    assert "TheLiteral" in shown
    assert 290 <= len(shown.strip(".")) <= 310


def test_a_hit_shows_only_the_line_of_its_match() -> None:
    source = "\n".join(f"    line_{n} = compute(value_{n})" for n in range(50))
    hit = search("value_25", [Item("k", 1, "read_file", source, 3)]).text.splitlines()[1]
    assert hit.endswith(": ...line_25 = compute(value_25)...")


def test_a_search_answer_stays_within_its_budget_and_names_the_rest() -> None:
    items = [Item(f"k{n}", n, "bash", f"{'w' * 200} Needle_{n} {'z' * 200}", n) for n in range(30)]
    found = search("needle_", items)
    lines = found.text.splitlines()
    assert sum(len(line) for line in lines[1:-1]) <= ANSWER_CHARS
    shown = [line for line in lines if line.startswith("- ")]
    assert 1 <= len(shown) < MAX_HITS and "Needle_29" in shown[0]
    rest = [f"k{n}" for n in range(29 - len(shown), 9, -1)]
    assert lines[-1] == f"{len(rest)} more, not previewed (refine the query): " + ", ".join(rest)
    assert found.scope["hits"] == [f"k{n}" for n in range(29, 9, -1)]  # re-derived from all 20
    one = search("needle_", [Item("big", 1, "bash", "x" * 5000 + "needle_" + "y" * 5000, 1)])
    assert len(one.text.splitlines()) == 2  # the first hit is always previewed


def test_a_search_reads_at_most_its_scan_cap_and_says_so() -> None:
    big = "z" * (MAX_SCAN_CHARS // 2)
    items = [Item("old", 1, "tool", "needle " + big, 1)]
    items += [Item(f"k{n}", 2, "tool", big, 2 + n) for n in range(3)]
    found = search("needle", items)
    assert found.text.startswith("No match") and "stopped early" in found.text
    assert found.scope["partial"] is True


def test_a_100_kb_original_is_read_in_pages() -> None:
    original = "".join(f"line {n:06d} of a long original\n" for n in range(3500))
    assert len(original) > 100_000
    book = Lookback([], {"call_big": original})
    pages, offset = [], 0
    while True:
        content, _ = answer_call(_extract("x", toolcall_id="call_big", offset=offset), book)
        text, _, note = content.rpartition("\n[")
        assert len(text) <= PAGE_CHARS
        pages.append(text)
        if note.endswith(": the end.]"):
            break
        offset = int(note.rsplit("offset ", 1)[1].rstrip(".]"))
    assert len(pages) == 6
    assert "".join(pages) == original
    # A short original comes whole, as it was sent.
    parts = [{"type": "text", "text": "short"}]
    assert page(parts) == parts
    assert page("x" * 30, offset=40).startswith("[Error] offset 40 is past the end")


def test_cut_messages_and_calls_are_read_by_their_ids() -> None:
    msgs = _history(6)
    rb = rebuild(msgs, _summarised(msgs), unmerge=WIRE.unmerge)
    book = lookback_of(rb)
    user, _ = answer_call(_extract("x", toolcall_id="msg:1"), book)
    assert user.startswith("[user]\nTurn 1: please look at UserLiteral1")
    assistant, _ = answer_call(_extract("x", toolcall_id="msg:2"), book)
    assert "AssistantLiteral1" in assistant and "[tool call c1] read_file(" in assistant
    call, _ = answer_call(_extract("x", toolcall_id="call:c1"), book)
    assert call == 'read_file({"path":"src/PathLiteral1.py"})'
    result, _ = answer_call(_extract("x", toolcall_id="c1"), book)
    assert result == msgs[3]["content"]
    missing, _ = answer_call(_extract("x", toolcall_id="msg:999"), book)
    assert missing.startswith("[Error] Nothing has ID 'msg:999'")


def _after_search(msgs: list[dict[str, Any]], state: SessionState, query: str) -> SessionState:
    """The turn after `msgs`: the model searched (alone in its round), then answered."""
    rb = rebuild(msgs, state, unmerge=WIRE.unmerge)
    message = {"role": "assistant", "content": None, "tool_calls": [_extract("s1", query=query)]}
    answered = Answered()
    results = answered.answer(extract_calls := message["tool_calls"], rb)
    shown = WIRE.hidden_round({}, _round(message), stream=False)[1]
    add_round(
        rb.state, len(msgs), round_entry(message, shown, results, answered.scopes(extract_calls))
    )
    return SessionState.from_bytes(record_turn(rb, total_tokens=1000).to_bytes())


def _round(message: dict[str, Any]) -> Any:
    from proxy.wire.base import Round

    return Round(message=message, usage=None, only_extract=True)


def test_a_search_answer_re_derives_to_the_same_bytes_after_later_compactions() -> None:
    msgs = _history(6)
    state = _after_search(msgs, _summarised(msgs), "literal")
    before = len(searchable(rebuild(msgs, SessionState.from_bytes(state.to_bytes()))))
    final = {"role": "assistant", "content": "Found it."}
    grown = [*msgs, final, *_turn(7), *_turn(8)]
    rb = rebuild(grown, state, unmerge=WIRE.unmerge)
    sent = rb.upstream_messages()
    answer = next(m for m in sent if m.get("role") == "tool" and m["tool_call_id"] == "s1")
    # The newest hit previewed, the oldest (past the answer's budget) named by their ids.
    assert "ToolLiteral5" in answer["content"]
    assert answer["content"].endswith(
        ": msg:10, c3, call:c3, msg:8, msg:7, c2, call:c2, msg:5, msg:4, c1, call:c1, msg:2, msg:1"
    )
    # More is reclaimed and cut since: a new search finds more, the recorded one says the same.
    rb.conversation.compact_toolcall(keep_max=1)
    apply_compaction(rb)
    state2 = SessionState.from_bytes(record_turn(rb, total_tokens=1000).to_bytes())
    later = rebuild([*grown, *_turn(9)], state2, unmerge=WIRE.unmerge)
    assert len(searchable(later)) > before
    assert len(later.state.hidden) == 1  # the round stays, its answer the same bytes
    assert later.originals[HIDDEN_KEY_PREFIX + "s1"] == answer["content"]
    # (sent as its placeholder now: level 1 reclaimed it like any other result)
    assert [m["content"] for m in later.upstream_messages() if m.get("tool_call_id") == "s1"] == [
        "[Compacted, ID: xun-extract:s1. If this content is still needed, call "
        "extract_compacted_tool_result with this ID or re-run the tool.]"
    ]


def test_an_extracted_original_is_reclaimed_again_by_the_next_level_1_round() -> None:
    msgs = _history(6)
    state = _summarised(msgs, keep=10)
    rb = rebuild(msgs, state, unmerge=WIRE.unmerge)
    reclaimed = next(k for k in rb.state.reclaimed if not k.startswith(HIDDEN_KEY_PREFIX))
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_extract("r1", toolcall_id=reclaimed)],
    }
    answered = Answered()
    results = answered.answer(message["tool_calls"], rb)
    assert results[0]["content"] == rb.originals[reclaimed]
    add_round(rb.state, len(msgs), round_entry(message, None, results))
    state = SessionState.from_bytes(record_turn(rb, total_tokens=1000).to_bytes())
    grown = [*msgs, {"role": "assistant", "content": "Read."}, *_turn(7), *_turn(8), *_turn(9)]
    rb = rebuild(grown, state, unmerge=WIRE.unmerge)
    key = HIDDEN_KEY_PREFIX + "r1"
    assert any(isinstance(m, RawOpenAIMessage) and m.key == key for m in rb.conversation.messages)
    rb.conversation.compact_toolcall(keep_max=1)
    apply_compaction(rb)
    assert key in rb.state.reclaimed
    sent = rb.upstream_messages()
    answer = next(m for m in sent if m.get("tool_call_id") == "r1")
    assert answer["content"].startswith("[Compacted, ID: xun-extract:r1.")
    # ... and the model can still read it back by that id.
    again, _ = answer_call(_extract("x", toolcall_id=key), lookback_of(rb))
    assert again == rb.originals[reclaimed]


def test_a_search_beside_the_clients_own_call_re_derives_after_later_compactions() -> None:
    """The model searched in the same message as a call of the client's own: the search goes
    back into that message on later requests, its answer the same bytes although more was
    cut and reclaimed since."""
    msgs = _history(6)
    rb = rebuild(msgs, _summarised(msgs), unmerge=WIRE.unmerge)
    own = [_call("own1", "read_file", {"path": "x.py"})]
    extract = [_extract("s2", query="toolliteral")]
    answered = Answered()
    results = answered.answer(extract, rb)
    assert "ToolLiteral5" in results[0]["content"] and results[0]["content"].endswith(" c1")
    add_hidden(rb.state, len(msgs), own, extract, results, answered.scopes(extract))
    state = SessionState.from_bytes(record_turn(rb, total_tokens=1000).to_bytes())
    echo = {"role": "assistant", "content": None, "tool_calls": own}
    grown = [*msgs, echo, {"role": "tool", "tool_call_id": "own1", "content": "x"}, *_turn(7)]
    rb = rebuild(grown, state, unmerge=WIRE.unmerge)
    rb.conversation.compact_toolcall(keep_max=1)
    rb.conversation.compact(lambda m: "SUMMARY AGAIN", keep_recent=8)
    apply_compaction(rb)
    state = SessionState.from_bytes(record_turn(rb, total_tokens=1000).to_bytes())
    later = rebuild([*grown, *_turn(8)], state, unmerge=WIRE.unmerge)
    assert len(later.state.hidden) == 1
    assert later.originals[HIDDEN_KEY_PREFIX + "s2"] == results[0]["content"]
    assert search("toolliteral", searchable(later)).text != results[0]["content"]
