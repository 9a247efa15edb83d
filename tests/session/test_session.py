"""Session state: reconciling with the client's history, rebuilding, reading compaction back."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from proxy.compact import CompactionContext, placeholder_for
from proxy.compaction.cache_aware import CacheAwareCompactor
from proxy.compaction.economics import Economics
from proxy.conversation_message import SystemPrompt
from proxy.session.extract_tool import answer_content
from proxy.session.fingerprint import PrefixChain
from proxy.session.history import (
    HIDDEN_KEY_PREFIX,
    UnrecognisedHistory,
    estimate_chars,
    estimate_tokens,
    reclaim_keys,
)
from proxy.session.rebuild import Rebuild, apply_compaction, rebuild, record_turn
from proxy.session.state import SessionState, add_hidden


def history(turns: int, size: int = 400, system: str | None = "sys") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": "start"})
    for i in range(turns):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}:" + "x" * size})
    return msgs


def compacted_state(msgs: list[dict[str, Any]], *, summary: bool = False) -> SessionState:
    rb = rebuild(msgs, None)
    rb.conversation.compact_toolcall(keep_max=4)
    if summary:
        rb.conversation.compact(lambda m: "SUM", keep_recent=7)
    apply_compaction(rb)
    return record_turn(rb, total_tokens=1000)


def tool_contents(msgs: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in msgs if m["role"] == "tool"]


def test_fresh_rebuild_is_exact() -> None:
    msgs = history(5)
    msgs[0] = {"role": "developer", "content": [{"type": "text", "text": "dev"}]}
    assert rebuild(msgs, None).upstream_messages() == msgs


def test_appended_turn_keeps_reclaims() -> None:
    msgs = history(10)
    state = compacted_state(msgs)
    assert state.reclaimed == [f"c{i}" for i in range(6)]
    more = [*msgs, {"role": "user", "content": "next"}]
    rb = rebuild(more, state)
    assert rb.reset_reason is None and rb.new_from == len(msgs)
    sent = tool_contents(rb.upstream_messages())
    assert sent[:6] == [placeholder_for(f"c{i}") for i in range(6)]
    assert sent[6:] == tool_contents(msgs)[6:]
    assert rb.originals["c0"] == msgs[3]["content"]


def test_summary_replaces_the_cut_and_keeps_client_system() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    assert state.summary == "SUM" and state.cut > 1
    rb = rebuild([*msgs, {"role": "user", "content": "next"}], state)
    sent = rb.upstream_messages()
    assert sent[0]["role"] == "system" and "SUM" in sent[0]["content"]
    assert sent[0]["content"].endswith("sys")
    moved = [msgs[state.moved_user]] if state.moved_user is not None else []
    assert sent[1:] == [*moved, *msgs[state.cut :], {"role": "user", "content": "next"}]


def test_moved_user_is_remembered_and_replayed() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    assert state.moved_user == 1  # the only user message was moved into the tail
    rb = rebuild([*msgs, {"role": "assistant", "content": "done"}], state)
    sent = rb.upstream_messages()
    assert sent[1] == msgs[1]
    assert sent[2] == msgs[state.cut]


def test_retry_of_last_turn_keeps_state() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    edited = [*msgs[:-1], {**msgs[-1], "content": "different result"}]
    rb = rebuild(edited, state)
    assert rb.reset_reason == "diverged_after_summary"
    assert rb.state.summary == "SUM"
    assert "different result" in tool_contents(rb.upstream_messages())


def test_edit_before_the_cut_drops_the_summary() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    edited = [msgs[0], {"role": "user", "content": "a different task"}, *msgs[2:]]
    rb = rebuild(edited, state)
    assert rb.reset_reason == "diverged"
    assert rb.state.summary is None
    sent = rb.upstream_messages()
    assert sent[1] == {"role": "user", "content": "a different task"}
    # Reclaims of results that still exist stay: their originals are still in the request.
    assert tool_contents(sent)[0] == placeholder_for("c0")


def test_client_side_truncation_scales_the_token_estimate() -> None:
    msgs = history(10)
    state = compacted_state(msgs)
    short = msgs[:1] + msgs[-4:-2]
    short.insert(1, {"role": "user", "content": "resume"})
    rb = rebuild(short, state)
    assert rb.reset_reason == "diverged"
    assert rb.state.total_tokens is not None and rb.state.total_tokens < 1000


def test_repeated_tool_call_ids_get_distinct_keys() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "u"}]
    for i in range(3):
        msgs.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "dup", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": "dup", "content": f"result {i} " + "y" * 300})
    assert list(reclaim_keys(msgs).values()) == ["dup", "dup#2", "dup#3"]
    rb = rebuild(msgs, None)
    rb.conversation.compact_toolcall(keep_max=1)
    apply_compaction(rb)
    assert rb.state.reclaimed == ["dup", "dup#2"]
    assert rb.originals["dup#2"].startswith("result 1")
    assert tool_contents(rb.upstream_messages())[1] == placeholder_for("dup#2")


def _calls_and_results(ids: list[str], size: int = 300) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "u"}]
    for i, call_id in enumerate(ids):
        call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        msgs.append({"role": "assistant", "tool_calls": [call]})
        content = f"result {i} " + "y" * size
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return msgs


@pytest.mark.parametrize(
    ("ids", "keys"),
    [
        (["call_r0", "call_r0#2", "call_r0"], ["call_r0", "call_r0#2", "call_r0#3"]),
        (["call_r0", "call_r0", "call_r0#2"], ["call_r0", "call_r0#2", "call_r0#2#2"]),
        (["a#2", "a", "a", "a"], ["a#2", "a", "a#3", "a#4"]),
        (["a", "a#2#2", "a", "a#2"], ["a", "a#2#2", "a#2", "a#2#3"]),
    ],
)
def test_client_ids_that_look_like_keys_never_share_one(ids: list[str], keys: list[str]) -> None:
    """Issue 26 item 7: every tool result has its own key, whatever ids the client picks, and
    each original comes back from its placeholder."""
    msgs = _calls_and_results(ids)
    assert list(reclaim_keys(msgs).values()) == keys
    rb = rebuild(msgs, None)
    rb.conversation.compact_toolcall(keep_max=0)
    apply_compaction(rb)
    assert rb.state.reclaimed == keys
    sent = tool_contents(rb.upstream_messages())
    assert sent == [placeholder_for(k) for k in keys]
    for i, key in enumerate(keys):
        assert rb.originals[key].startswith(f"result {i} ")
        assert rb.conversation.compacted_toolcall_result(key) == msgs[2 + 2 * i]["content"]


@pytest.mark.parametrize(
    ("ids", "keys"),
    [
        (["xun-extract:h1"], ["xun-client:xun-extract:h1"]),
        (["xun-client:a", "a"], ["xun-client:xun-client:a", "a"]),
        (
            ["xun-extract:h1", "xun-client:xun-extract:h1"],
            ["xun-client:xun-extract:h1", "xun-client:xun-client:xun-extract:h1"],
        ),
    ],
)
def test_client_keys_never_take_a_hidden_results_key(ids: list[str], keys: list[str]) -> None:
    """Hidden extract results are keyed `xun-extract:<call id>`: a client id of that form
    is escaped (one to one), so both originals stay apart and extractable."""
    msgs = _calls_and_results(ids)
    assert list(reclaim_keys(msgs).values()) == keys
    assert not any(k.startswith(HIDDEN_KEY_PREFIX) for k in keys)


def test_a_client_id_shaped_like_a_hidden_key_keeps_its_own_original() -> None:
    msgs = history(3)
    msgs[2]["tool_calls"][0]["id"] = msgs[3]["tool_call_id"] = "xun-extract:ext1"
    rb = rebuild(msgs, None)
    own = [{"id": "own1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    function = {"name": "extract_compacted_tool_result", "arguments": '{"toolcall_id":"c1"}'}
    ext = [{"id": "ext1", "type": "function", "function": function}]
    # The proxy's answer: c1's original (hidden answers are re-derived from the client's own)
    orig = answer_content(ext[0], rb.originals)
    assert orig == msgs[5]["content"]
    hidden = [{"role": "tool", "tool_call_id": "ext1", "content": orig}]
    add_hidden(rb.state, len(msgs), own, ext, hidden)
    state = record_turn(rb, total_tokens=10)
    nxt = [
        *msgs,
        {"role": "assistant", "content": None, "tool_calls": own},
        {"role": "tool", "tool_call_id": "own1", "content": "r"},
    ]
    rb = rebuild(nxt, state)
    assert rb.originals["xun-extract:ext1"] == orig
    assert rb.originals["xun-client:xun-extract:ext1"] == msgs[3]["content"]


def test_keys_of_earlier_results_never_change_as_the_history_grows() -> None:
    ids = ["x", "x", "x#2", "x#3", "x", "x#2"]
    msgs = _calls_and_results(ids)
    whole = reclaim_keys(msgs)
    for n in range(1, len(msgs) + 1):
        assert reclaim_keys(msgs[:n]) == {i: k for i, k in whole.items() if i < n}


def test_a_state_saved_under_the_count_based_keys_still_reads() -> None:
    """A state written before distinct keys (ids `r`, `r#2`, `r` then both gave `r#2`) is
    read as is: its keys name the same results where they were distinct, and its colliding
    key now names the one result whose key it is, the other going up whole."""
    msgs = _calls_and_results(["r", "r#2", "r"])
    state = compacted_state(msgs)
    state.reclaimed = ["r", "r#2"]  # what the old scheme stored for all three
    state = SessionState.from_bytes(state.to_bytes())
    rb = rebuild(msgs, state)
    assert rb.reset_reason is None
    sent = tool_contents(rb.upstream_messages())
    assert sent == [placeholder_for("r"), placeholder_for("r#2"), msgs[6]["content"]]
    assert rb.originals["r#2"] == msgs[4]["content"]


def test_hidden_extract_calls_are_reinserted_and_dropped_when_the_client_diverges() -> None:
    msgs = history(3)
    rb = rebuild(msgs, None)
    own = [{"id": "own1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    ext = [
        {
            "id": "ext1",
            "type": "function",
            "function": {
                "name": "extract_compacted_tool_result",
                "arguments": '{"toolcall_id":"c0"}',
            },
        }
    ]
    orig = msgs[3]["content"]  # the proxy's answer: the original of c0
    add_hidden(
        rb.state, len(msgs), own, ext, [{"role": "tool", "tool_call_id": "ext1", "content": orig}]
    )
    state = record_turn(rb, total_tokens=10)
    nxt = [
        *msgs,
        {"role": "assistant", "content": None, "tool_calls": own},
        {"role": "tool", "tool_call_id": "own1", "content": "r"},
    ]
    rb = rebuild(nxt, state)
    sent = rb.upstream_messages()
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["own1", "ext1"]
    assert sent[-2] == {"role": "tool", "tool_call_id": "ext1", "content": orig}
    assert rb.originals == {
        "c0": msgs[3]["content"],
        "c1": msgs[5]["content"],
        "c2": msgs[7]["content"],
        "own1": "r",
        "xun-extract:ext1": orig,
    }
    other = [
        *msgs,
        {"role": "assistant", "content": None, "tool_calls": [{**own[0], "id": "own2"}]},
        {"role": "tool", "tool_call_id": "own2", "content": "r"},
    ]
    assert rebuild(other, state).upstream_messages() == other


@pytest.mark.parametrize(
    "messages",
    [
        "not a list",
        [{"role": "wizard", "content": "x"}],
        [{"role": "tool", "tool_call_id": "orphan", "content": "x"}],
        [{"role": "user", "content": "x"}, "not a dict"],
        [{"role": "assistant", "tool_calls": "nope"}],
    ],
)
def test_unrecognised_histories_are_refused_for_pass_through(messages: Any) -> None:
    with pytest.raises(UnrecognisedHistory):
        rebuild(messages, None)


def test_projected_tokens_add_the_new_messages() -> None:
    msgs = history(4)
    state = compacted_state(msgs)
    big = {"role": "tool", "tool_call_id": "c3", "content": "z" * 40_000}
    more = [
        *msgs,
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {**big, "tool_call_id": "c9"},
    ]
    rb = rebuild(more, state)
    assert rb.projected_tokens() >= 1000 + 10_000
    assert rebuild(msgs, None).projected_tokens() == estimate_tokens(msgs)


def test_state_round_trips_through_bytes() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    assert SessionState.from_bytes(state.to_bytes()) == state


def test_the_view_grows_by_what_each_turn_added() -> None:
    msgs = history(30)
    state = None
    for n in range(3, len(msgs) + 1, 2):
        rb = rebuild(msgs[:n], state)
        state = record_turn(rb, total_tokens=100)
        assert state.view_messages() == msgs[:n]
    assert state is not None and isinstance(state.view, list) and len(state.view) > 1
    # An edit makes the view start over from the new history.
    edited = [msgs[0], {"role": "user", "content": "changed"}, *msgs[2:]]
    state = record_turn(rebuild(edited, state), total_tokens=100)
    assert state.view_messages() == edited and len(state.view or []) == 1


def test_a_history_resent_unchanged_is_hashed_only_from_where_it_grew() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    more = [*msgs, {"role": "user", "content": "next"}]
    rb = rebuild(more, SessionState.from_bytes(state.to_bytes()))
    assert rb.reset_reason is None and rb.new_from == len(msgs)
    record_turn(rb, total_tokens=1100)
    assert rb.chain._digests[: len(msgs)] == [None] * len(msgs)  # never canonicalised
    assert rb.state.prefix_hash == PrefixChain(more).prefix(len(more))
    assert rb.state.prefix_chars == estimate_chars(more)


def test_a_history_reserialised_differently_still_matches_by_its_canonical_form() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    reordered = [dict(reversed(list(m.items()))) for m in msgs]  # same messages, keys reversed
    rb = rebuild([*reordered, {"role": "user", "content": "next"}], state)
    assert rb.reset_reason is None and rb.state.summary == "SUM"
    assert rb.new_from == len(msgs)


def test_a_state_saved_before_the_running_chain_is_upgraded_not_reset() -> None:
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    old = PrefixChain(msgs)
    saved = state.to_dict()
    saved.update(
        state_version=1,
        prefix_hash=old.legacy_prefix(state.prefix_len),
        cut_hash=old.legacy_prefix(state.cut),
    )
    del saved["prefix_raw"], saved["chain"]
    legacy = SessionState.from_dict(saved)
    assert legacy.chain == 1
    rb = rebuild([*msgs, {"role": "user", "content": "next"}], legacy)
    assert rb.reset_reason is None and rb.state.summary == "SUM"
    assert rb.state.reclaimed == state.reclaimed
    assert (rb.state.prefix_hash, rb.state.cut_hash) == (state.prefix_hash, state.cut_hash)
    assert rb.state.chain == 2


def test_a_raw_hash_computed_another_way_costs_one_canonical_check() -> None:
    """States saved before the raw hash was of the list as orjson writes it hashed each
    message and a newline: their prefix is checked in canonical form once, then trusted."""
    msgs = history(10)
    state = compacted_state(msgs, summary=True)
    before = hashlib.sha256(b"".join(orjson.dumps(m) + b"\n" for m in msgs)).hexdigest()
    old = SessionState.from_dict({**state.to_dict(), "prefix_raw": before})
    more = [*msgs, {"role": "user", "content": "next"}]
    rb = rebuild(more, old)
    assert rb.reset_reason is None and rb.new_from == len(msgs)
    assert rb.chain._digests[0] is not None  # not trusted: canonicalised from the start
    same = rebuild(more, SessionState.from_bytes(state.to_bytes()))
    assert same.chain._digests[0] is None  # trusted: only the new message canonicalised
    assert rb.upstream_messages() == same.upstream_messages()
    record_turn(rb, total_tokens=1100, now=0.0)
    assert rb.state == record_turn(same, total_tokens=1100, now=0.0)
    rb = rebuild([*more, {"role": "user", "content": "again"}], rb.state)
    assert rb.reset_reason is None and rb.chain._digests[: len(more)] == [None] * len(more)


def test_tool_results_are_read_when_first_asked_for() -> None:
    """An uncompacted session's request needs neither its reclaim keys nor their contents."""
    msgs = history(4)
    msgs[-1]["tool_call_id"] = msgs[-3]["tool_call_id"] = "same"
    msgs[-2]["tool_calls"][0]["id"] = msgs[-4]["tool_calls"][0]["id"] = "same"
    rb = rebuild(msgs, None)
    assert rb.upstream_messages() == msgs and rb._results is None
    assert rb.keys == reclaim_keys(msgs) == {3: "c0", 5: "c1", 7: "same", 9: "same#2"}
    assert rb.originals == {k: msgs[i]["content"] for i, k in rb.keys.items()}


def _as_the_conversation_sends(rb: Rebuild) -> tuple[list[dict[str, Any]], int]:
    """What `upstream_messages` and `sent_estimate` gave once the conversation was built (the
    conversation's params, the client's own system messages in place of the prompt)."""
    params = [
        m.completion_param() for m in rb.conversation.messages if not isinstance(m, SystemPrompt)
    ]
    sent = [*rb.messages[: rb.system_count], *params]
    return sent, estimate_tokens(sent)


@pytest.mark.parametrize("system", ["sys", None, [{"type": "text", "text": "dev"}]])
@pytest.mark.parametrize("resent", [False, True])
def test_a_conversation_only_read_sends_the_clients_messages(system: Any, resent: bool) -> None:
    """A compactor that waits builds the conversation and changes nothing: the request goes
    up as the client sent it (the fast path), equal to what converting it back gives."""
    msgs = history(12, system=None if system is None else "sys")
    if isinstance(system, list):
        msgs[0] = {"role": "developer", "content": system}
    state = record_turn(rebuild(msgs[:-3], None), total_tokens=5000) if resent else None
    rb = rebuild(msgs, state)
    agent = CompactionContext(rb.conversation, lambda m: None, 500, Economics(cache_factor=0.0))
    rb.conversation.total_tokens = rb.projected_tokens()
    assert not CacheAwareCompactor().would_compact(agent)
    sent, estimate = _as_the_conversation_sends(rb)
    assert rb.unchanged() and rb.outgoing().unchanged
    assert rb.upstream_messages() == sent == msgs
    assert rb.sent_estimate() == estimate
    # Any change to the conversation ends the fast path: a reclaimed result, a summary.
    rb.conversation.reclaim(["c0"])
    assert not rb.unchanged() and not rb.outgoing().unchanged
    assert rb.upstream_messages() == _as_the_conversation_sends(rb)[0] != msgs
    assert rb.sent_estimate() == _as_the_conversation_sends(rb)[1] < estimate
    other = rebuild(msgs, None)
    other.conversation.compact(lambda m: "SUM", keep_recent=7)
    assert not other.unchanged()
    assert other.upstream_messages() == _as_the_conversation_sends(other)[0]


def test_without_level1_no_placeholder_is_written_nor_applied() -> None:
    """Issue 26 item 8: a request whose client owns the extract tool's name rebuilds with
    level 1 off: the compactor reclaims nothing and the state's reclaimed keys stay unapplied."""
    msgs = history(8)
    state = compacted_state(msgs)
    assert state.reclaimed
    rb = rebuild(msgs, SessionState.from_bytes(state.to_bytes()))
    rb.level1 = False
    assert tool_contents(rb.upstream_messages()) == tool_contents(msgs)
    assert rb.conversation.compact_toolcall(keep_max=0).reclaimed_count == 0
    fresh = rebuild(msgs, None)
    fresh.level1 = False
    assert fresh.conversation.compact_toolcall(keep_max=0).reclaimed_count == 0
    assert fresh.conversation.reclaim(["c0"]) == 0
