"""The pure layers against real agent trajectories (tests/support/corpus.py): the converters and the
validity checker, fingerprint prefix stability, and replaying sessions through
`proxy.session.rebuild` with both compaction levels, checking what goes upstream and what can be
extracted back.

The replays and the checks of every trajectory run on the full corpus where it sits beside the
checkout, else on the sample committed with the tests (tests/corpus_sample/README.md); the
checks of the full corpus's own contents (its shape, known sizes, tau-bench and Claude Code
specifics) run only where it is.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.compact import placeholder_for
from proxy.conversation_message import SystemPrompt
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, answer, answer_content, content_text
from proxy.session.fingerprint import PrefixChain, canonical
from proxy.session.history import estimate_tokens
from proxy.session.rebuild import Rebuild, apply_compaction, rebuild, record_turn
from proxy.session.state import SessionState
from proxy.session.tool_output import as_text
from tests.support import corpus
from tests.support.corpus import (
    CORPUS_DIR,
    FULL_CORPUS,
    REPLAY_DIR,
    Trajectory,
    load_all,
    turns,
    validate_sequence,
)

full_corpus = pytest.mark.skipif(not FULL_CORPUS, reason=f"no full corpus at {CORPUS_DIR}")

ALL: list[Trajectory] = load_all(REPLAY_DIR)
BY_NAME = {t.name: t for t in ALL}
NOT_TAU = [t for t in ALL if not t.source.startswith("tau")]
LONG = [t for t in ALL if t.source in corpus.LONG_SOURCES]
NOT_LONG = [t for t in ALL if t not in LONG]
# The 20 tau-bench conversations that reuse tool_call ids most.
TAU_REPEATS = sorted(
    (t for t in ALL if t.source == "tau-bench"),
    key=lambda t: (-corpus.repeated_ids(t.messages), t.name),
)[:20]
# OpenHands, SWE-agent and a few tau2: too few results for level 1 to reclaim with 12 kept.
SHORT = [t for t in NOT_TAU if t not in LONG] + [t for t in ALL if t.source == "tau2-bench"][:5]


def names(trajectories: list[Trajectory]) -> list[str]:
    return [t.name for t in trajectories]


# -- the corpus itself --------------------------------------------------------------------


def test_the_replays_have_trajectories() -> None:
    """The sample (or the corpus) holds long ones, short ones, and some with reasoning."""
    assert LONG and SHORT and NOT_LONG
    if not FULL_CORPUS:
        assert names(ALL) == [
            "mini-v1/django__django-16560",
            "openhands/ponylang__ponyc-4595",
            "openhands/ponylang__ponyc-4588",
        ]


@full_corpus
def test_corpus_shape() -> None:
    counts = Counter(t.source for t in ALL)
    assert counts == {
        "mini-swe-agent-v1": 4,
        "mini-swe-agent-v2": 3,
        "claude-code": 4,
        "openhands": 3,
        "swe-agent": 1,
        "tau-bench": 200,
        "tau2-bench": 40,
    }
    assert len(names(ALL)) == len(BY_NAME), "trajectory names are unique"
    tau = [t for t in ALL if t.source == "tau-bench"]
    assert sum(1 for t in tau if corpus.repeated_ids(t.messages)) == 49  # SOURCES.md 3.6
    assert not any(corpus.repeated_ids(t.messages) for t in ALL if t.source == "tau2-bench")
    for traj in LONG:
        assert corpus.describe(traj)["tool_messages"] >= 40, traj.name


@full_corpus
@pytest.mark.parametrize(
    ("name", "messages", "tool_messages", "peak"),
    [
        ("mini-v1/scikit-learn__scikit-learn-25102", 88, 41, 106_497),
        ("mini-v1/pylint-dev__pylint-6528", 196, 95, 95_507),
        ("mini-v2/pylint-dev__astroid-1333", 376, 187, 101_667),
        ("mini-v2/django__django-13964", 331, 164, 71_785),
        ("claude-code/4d5611e5#0", 132, 69, 164_831),
        ("claude-code/4d5611e5#1", 161, 81, 106_060),
        ("claude-code/8463c716#0", 160, 88, 167_094),
        ("claude-code/8463c716#1", 163, 89, 132_648),
        ("openhands/ponylang__ponyc-4588", 101, 49, 27_127),
        ("openhands/ponylang__ponyc-4595", 46, 22, 33_459),
        ("swe-agent/marshmallow-code__marshmallow-1867", 28, 13, None),
    ],
)
def test_known_sizes(name: str, messages: int, tool_messages: int, peak: int | None) -> None:
    stats = corpus.describe(BY_NAME[name])
    assert (stats["messages"], stats["tool_messages"], stats["reported_peak"]) == (
        messages,
        tool_messages,
        peak,
    )


def test_loading_is_cached() -> None:
    """Each file is read once: a second load reads none and returns the same objects."""
    corpus._load_all.cache_clear()
    corpus._read.cache_clear()
    corpus._read_lines.cache_clear()
    fresh = load_all(REPLAY_DIR)
    reads = corpus._read.cache_info().misses + corpus._read_lines.cache_info().misses
    files = [p for pattern, _ in corpus.LOADERS for p in REPLAY_DIR.glob(pattern)]
    assert reads == len(files) > 0
    again = load_all(REPLAY_DIR)
    assert corpus._read.cache_info().misses + corpus._read_lines.cache_info().misses == reads
    assert all(a is b for a, b in zip(fresh, again, strict=True))
    assert [t.messages for t in fresh] == [t.messages for t in ALL]


def test_corpus_dir_follows_the_environment(tmp_path: Path) -> None:
    code = "from tests.support import corpus; print(corpus.CORPUS_DIR)"
    env = {**os.environ, "XUN_CORPUS_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(tmp_path)
    assert load_all(tmp_path) == []


@full_corpus
def test_tau2_greeting_is_not_a_model_turn() -> None:
    for traj in (t for t in ALL if t.source == "tau2-bench"):
        assert traj.messages[1]["role"] == "assistant"  # the canned greeting
        assistants = sum(1 for m in traj.messages if m["role"] == "assistant")
        assert sum(1 for _ in turns(traj)) == assistants - 1


@pytest.mark.parametrize("traj", ALL, ids=names(ALL))
def test_trajectory_and_every_turn_is_valid(traj: Trajectory) -> None:
    validate_sequence(traj.messages)
    assert traj.tools and all(t["function"]["name"] for t in traj.tools)
    used = {c["function"]["name"] for m in traj.messages for c in m.get("tool_calls") or []}
    assert used <= {t["function"]["name"] for t in traj.tools}
    replies = 0
    for history, reply in turns(traj):
        validate_sequence(history)
        assert reply["role"] == "assistant" and traj.messages[len(history)] is reply
        replies += 1
    assert replies > 0


@full_corpus
def test_tau_bench_messages_are_the_file_itself() -> None:
    path = next(CORPUS_DIR.glob("tau-bench_gpt-4o/*.json"))
    runs = json.loads(path.read_text(encoding="utf-8"))
    ours = [t for t in ALL if t.source == "tau-bench"]
    assert len(ours) == len(runs)
    for traj, run in zip(ours, runs, strict=True):
        assert json.dumps(traj.messages) == json.dumps(run["traj"]), traj.name


def test_mini_v1_calls_are_the_bash_blocks() -> None:
    for traj in (t for t in ALL if t.source == "mini-swe-agent-v1"):
        calls = [c for m in traj.messages for c in m.get("tool_calls") or []]
        assert [c["id"] for c in calls] == [f"call_{k}" for k in range(1, len(calls) + 1)]
        for msg in traj.messages:
            for call in msg.get("tool_calls") or []:
                command = json.loads(call["function"]["arguments"])["command"]
                assert f"```bash\n{command}\n```" in msg["content"]
        errors = [m for m in traj.messages if m["role"] == "user"][1:]
        assert all(m["content"].startswith("Please always provide EXACTLY ONE") for m in errors)
        assert traj.messages[-1]["role"] == "tool"  # the submission diff


@full_corpus
def test_claude_code_segments_split_at_the_compaction() -> None:
    segments = [t for t in ALL if t.source == "claude-code"]
    assert [t.name[-2:] for t in segments] == ["#0", "#1", "#0", "#1"]
    for first, second in (segments[:2], segments[2:]):
        assert first.messages[0]["content"].startswith("Work on bead")
        assert second.messages[0]["content"].startswith("This session is being continued")
        assert (first.reported_peak or 0) > 160_000 > (second.reported_peak or 0) > 0
    thinking = sum(1 for t in segments for m in t.messages if m.get("reasoning_content"))
    assert thinking == 33


def calling(*call_ids: str, arguments: Any = "{}") -> dict[str, Any]:
    fn = {"name": "f", "arguments": arguments}
    calls = [{"id": c, "type": "function", "function": fn} for c in call_ids]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "out"}


BAD_SEQUENCES = [
    ([result("a")], "message 0: tool result for 'a' does not follow an assistant"),
    ([calling("a")], "ends before the results of calls ['a'] made by the assistant message 0"),
    ([calling("a"), {"role": "user", "content": "hi"}], "message 1 (user) comes before"),
    ([calling("a"), result("a"), result("a")], "message 2: second result for tool call 'a'"),
    ([calling("a"), result("b")], "message 1: tool result for 'b' does not follow"),
    ([calling("a", "a")], "tool call id 'a' appears twice in one message"),
    ([calling("a", arguments={})], "message 0, tool call 0: arguments are not a string"),
    ([{"role": "assistant", "content": None, "tool_calls": []}], "non-empty list"),
    ([{"role": "assistant", "content": None}], "message 0 (assistant) has no content"),
    ([{"role": "exit", "content": "diff"}], "message 0: unknown role 'exit'"),
]


@pytest.mark.parametrize(("messages", "expected"), BAD_SEQUENCES)
def test_validate_sequence_names_the_fault(messages: list[dict[str, Any]], expected: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(expected)):
        validate_sequence(messages)


# -- fingerprints -------------------------------------------------------------------------


@pytest.mark.parametrize("traj", ALL, ids=names(ALL))
def test_prefix_chain_is_stable_from_turn_to_turn(traj: Trajectory) -> None:
    previous: PrefixChain | None = None
    for history, _ in turns(traj):
        chain = PrefixChain(history)
        if previous is not None:
            n = len(previous)
            assert chain.digests[:n] == previous.digests
            assert chain.prefix(n) == previous.prefix(n)
            assert chain.common_prefix(previous.digests) == n
        previous = chain


def echoed(msg: dict[str, Any], *, as_parts: bool) -> dict[str, Any]:
    """An assistant message as an SDK client sends it back: extra nulls, maybe text parts."""
    out = {**msg, "refusal": None, "audio": None, "annotations": None, "function_call": None}
    if as_parts and isinstance(msg.get("content"), str):
        out["content"] = [{"type": "text", "text": msg["content"]}]
    return out


@pytest.mark.parametrize("traj", ALL, ids=names(ALL))
def test_echoed_assistant_messages_fingerprint_equal(traj: Trajectory) -> None:
    for as_parts in (False, True):
        echo = [
            echoed(m, as_parts=as_parts) if m["role"] == "assistant" else m for m in traj.messages
        ]
        for mine, theirs in zip(traj.messages, echo, strict=True):
            assert canonical(mine) == canonical(theirs)
        n = len(echo)
        assert PrefixChain(echo).prefix(n) == PrefixChain(traj.messages).prefix(n)


# -- replaying sessions through proxy.session.rebuild ---------------------------------------------


@dataclass
class Replay:
    """How a replay compacts: level 1 every `toolcall_every` turns, a summary every
    `summary_every`; only every `step`-th turn is sent (the rest arrive as new messages)."""

    keep_max: int = 12
    toolcall_every: int = 3
    summary_every: int = 10
    step: int = 1
    compact: bool = True
    echo: bool = False  # send assistant messages back as an SDK client does, shape varying
    verified_keys: set[str] = field(default_factory=set)
    summaries: int = 0
    reasoning_seen: int = 0


def expected_keys(messages: list[dict[str, Any]]) -> dict[int, str]:
    """Our own reading of the reclaim keys: the n-th result with one id is `id#n` (n >= 2)."""
    seen: Counter[str] = Counter()
    keys = {}
    for i, msg in enumerate(messages):
        if msg["role"] == "tool":
            seen[msg["tool_call_id"]] += 1
            n = seen[msg["tool_call_id"]]
            keys[i] = msg["tool_call_id"] if n == 1 else f"{msg['tool_call_id']}#{n}"
    return keys


def summarize(replay: Replay, turn: int) -> Callable[[list[dict[str, Any]]], str]:
    def run(messages: list[dict[str, Any]]) -> str:
        # What goes to the summariser is sent upstream too: it must be a valid sequence.
        validate_sequence(messages)
        replay.summaries += 1
        return f"summary of turn {turn}"

    return run


def extract_call(key: str, offset: int = 0) -> dict[str, Any]:
    arguments = json.dumps({"toolcall_id": key, **({"offset": offset} if offset else {})})
    return {
        "id": "x",
        "type": "function",
        "function": {"name": EXTRACT_TOOL_NAME, "arguments": arguments},
    }


PAGE = 20_000  # what one read returns of a longer original (issue 35)


def check_read_back(key: str, originals: dict[str, Any], original: Any) -> None:
    """The answer is the original whole (issue 26 item 4: parts kept, not joined) when its text
    fits a page; a longer one comes in pages of 20,000 characters that join to its text."""
    text = as_text(original)
    if len(text) <= PAGE:
        assert answer_content(extract_call(key), originals) == original
        assert answer(extract_call(key), originals) == text
        return
    pages, offset = [], 0
    while offset < len(text):
        got = answer_content(extract_call(key, offset), originals)
        body, _, note = got.rpartition("\n[Characters ")
        assert len(body) <= PAGE and note.startswith(f"{offset}-")
        pages.append(body)
        offset += len(body)
    assert "".join(pages) == text


def check_upstream(rb: Rebuild, history: list[dict[str, Any]], replay: Replay) -> None:
    up = rb.upstream_messages()
    validate_sequence(up)
    state = rb.state
    if not state.compacted:
        assert up == history
        return
    conv_msgs = [m for m in rb.conversation.messages if not isinstance(m, SystemPrompt)]
    origin = [rb.origin[id(m)] for m in conv_msgs]
    tail = up[len(up) - len(conv_msgs) :]
    if state.summary:
        moved = [state.moved_user] if state.moved_user is not None else []
        assert origin == moved + list(range(state.cut, len(history)))
        head = up[: len(up) - len(conv_msgs)]
        assert len(head) == 1 and head[0]["role"] == "system"
        assert state.summary in head[0]["content"]
        for i in range(rb.system_count):
            assert content_text(history[i]["content"]) in head[0]["content"]
    else:
        assert origin == list(range(rb.system_count, len(history)))
        assert up[: rb.system_count] == history[: rb.system_count]
    # Keys of summarised results may stay reclaimed (they matter if the client edits history
    # before the cut); those still sent must be placeholders.
    reclaimed = set(state.reclaimed)
    assert reclaimed <= set(rb.keys.values())
    sent_keys = {rb.keys[i] for i in origin if i in rb.keys}
    for i, sent in zip(origin, tail, strict=True):
        client = history[i]
        key = rb.keys.get(i)
        if key in reclaimed:
            assert sent == {**client, "content": placeholder_for(key)}
        else:
            assert sent == client, f"message {i} changed on its way upstream"
        for fld in ("reasoning", "reasoning_content"):
            if fld in client:
                assert sent[fld] == client[fld]
                replay.reasoning_seen += 1
    for key in reclaimed:
        index = next(i for i, k in rb.keys.items() if k == key)
        original = history[index]["content"]
        assert orjson.dumps(rb.originals[key]) == orjson.dumps(original)
        if key in sent_keys:
            assert rb.conversation.compacted_toolcall_result(key) == original
        check_read_back(key, rb.originals, original)
        replay.verified_keys.add(key)


def replay_session(traj: Trajectory, replay: Replay) -> SessionState | None:
    snapshot = orjson.dumps(traj.messages)
    state: SessionState | None = None
    sent = 0
    for k, (history, _) in enumerate(turns(traj)):
        if k % replay.step and len(history) + 1 < len(traj.messages):
            continue
        if replay.echo:
            history = [
                echoed(m, as_parts=bool((k + i) % 2)) if m["role"] == "assistant" else m
                for i, m in enumerate(history)
            ]
        rb = rebuild(history, state)
        if state is not None:
            assert rb.reset_reason is None and rb.new_from == state.prefix_len
        assert rb.keys == expected_keys(history)
        if replay.compact and sent % replay.toolcall_every == replay.toolcall_every - 1:
            rb.conversation.compact_toolcall(keep_max=replay.keep_max)
        if replay.compact and sent % replay.summary_every == replay.summary_every - 1:
            rb.conversation.compact(summarize(replay, k), keep_recent=16)
        apply_compaction(rb)
        check_upstream(rb, history, replay)
        used = estimate_tokens(rb.upstream_messages())
        state = record_turn(rb, total_tokens=used, now=0.0)
        state = SessionState.from_bytes(state.to_bytes())  # as a store keeps it
        sent += 1
    assert orjson.dumps(traj.messages) == snapshot, "the client's messages were changed"
    return state


@functools.cache
def compacted_replay(name: str) -> tuple[SessionState | None, Replay]:
    """A long trajectory replayed with both levels (every other turn); shared by the tests
    that start from its final state. The replay checks every turn as it goes."""
    replay = Replay(step=2)
    return replay_session(BY_NAME[name], replay), replay


@pytest.mark.parametrize("traj", LONG, ids=names(LONG))
def test_replay_long_without_compaction_is_transparent(traj: Trajectory) -> None:
    state = replay_session(traj, Replay(compact=False, step=3))
    assert state is not None and not state.compacted


@pytest.mark.parametrize("traj", LONG, ids=names(LONG))
def test_replay_long_echoing_client_with_compaction(traj: Trajectory) -> None:
    """Echoed assistant messages (extra nulls, text parts, the shape changing from one
    request to the next) still match the stored prefix and go upstream as sent."""
    replay = Replay(step=3, echo=True)
    state = replay_session(traj, replay)
    assert state is not None and state.resets == 0 and state.summary


@pytest.mark.parametrize("traj", NOT_LONG, ids=names(NOT_LONG))
def test_replay_short_without_compaction_is_transparent(traj: Trajectory) -> None:
    state = replay_session(traj, Replay(compact=False))
    assert state is not None and not state.compacted


@pytest.mark.parametrize("traj", LONG, ids=names(LONG))
def test_replay_long_with_compaction(traj: Trajectory) -> None:
    state, replay = compacted_replay(traj.name)
    assert state is not None and state.summary and state.summary_rounds == replay.summaries > 0
    assert replay.verified_keys, "level 1 reclaimed something"
    reasoning = sum(1 for m in traj.messages if "reasoning" in m or "reasoning_content" in m)
    assert bool(replay.reasoning_seen) == bool(reasoning)


@pytest.mark.parametrize("traj", LONG, ids=names(LONG))
def test_branching_back_keeps_only_what_still_holds(traj: Trajectory) -> None:
    """After a compacted replay the client goes back to an earlier turn (a retry or edit):
    the summary stays only when the client still has everything it replaced."""
    final, _ = compacted_replay(traj.name)
    assert final is not None and final.summary
    history_at = [h for h, _ in turns(traj)]
    after_cut = next(h for h in history_at if final.cut < len(h) < final.prefix_len)
    before_cut = next(h for h in reversed(history_at) if len(h) < final.cut)
    for history, kept in ((after_cut, True), (before_cut, False)):
        rb = rebuild(history, SessionState.from_bytes(final.to_bytes()))
        assert rb.reset_reason == ("diverged_after_summary" if kept else "diverged")
        assert bool(rb.state.summary) is kept
        apply_compaction(rb)
        check_upstream(rb, history, Replay())


@full_corpus
@pytest.mark.parametrize("session", ["4d5611e5", "8463c716"])
def test_client_side_compaction_starts_afresh(session: str) -> None:
    """Claude Code compacted on its own side: the next request no longer holds what the
    proxy summarised, so no summary of it may be sent."""
    before, after = BY_NAME[f"claude-code/{session}#0"], BY_NAME[f"claude-code/{session}#1"]
    state, _ = compacted_replay(before.name)
    assert state is not None and state.summary
    history, _ = next(turns(after))
    rb = rebuild(history, SessionState.from_bytes(state.to_bytes()))
    assert rb.reset_reason == "diverged" and not rb.state.summary
    assert rb.upstream_messages() == history


def reclaimable(traj: Trajectory, keep_max: int) -> set[str]:
    """Keys level 1 must have reclaimed by the last turn when it ran on every turn: all but
    the newest `keep_max` results, where the placeholder is shorter than the original."""
    history, _ = list(turns(traj))[-1]
    keys = expected_keys(history)
    old = sorted(keys)[: max(0, len(keys) - keep_max)]
    return {
        keys[i]
        for i in old
        if len(placeholder_for(keys[i])) < len(content_text(history[i]["content"]))
    }


@pytest.mark.parametrize("traj", SHORT, ids=names(SHORT))
def test_replay_short_with_compaction(traj: Trajectory) -> None:
    replay = Replay(keep_max=2, toolcall_every=1, summary_every=8)
    replay_session(traj, replay)
    assert reclaimable(traj, 2) <= replay.verified_keys


@full_corpus
@pytest.mark.parametrize("traj", TAU_REPEATS, ids=names(TAU_REPEATS))
def test_replay_tau_bench_with_repeated_ids(traj: Trajectory) -> None:
    """tau-bench reuses tool_call ids: each result is still reclaimed and extracted by its
    own key (`id`, `id#2`, ...)."""
    replay = Replay(keep_max=1, toolcall_every=1, summary_every=6)
    replay_session(traj, replay)
    assert reclaimable(traj, 1) <= replay.verified_keys


@full_corpus
def test_tau_sample_reclaims_repeated_ids() -> None:
    """The sample does exercise the `id#n` keys, not only first occurrences."""
    repeated = [k for t in TAU_REPEATS for k in reclaimable(t, 1) if "#" in k]
    assert len(repeated) >= 10


def test_extract_unknown_key_is_a_clear_error() -> None:
    traj = TAU_REPEATS[0] if TAU_REPEATS else SHORT[0]
    history, _ = list(turns(traj))[-1]
    rb = rebuild(history, None)
    rb.conversation.compact_toolcall(keep_max=0)
    apply_compaction(rb)
    assert answer(extract_call("no-such-id"), rb.originals).startswith("[Error]")
    for key in rb.state.reclaimed:
        check_read_back(key, rb.originals, rb.originals[key])
