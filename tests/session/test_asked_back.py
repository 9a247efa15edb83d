"""What the model asks back of what compaction took, and level 1 learning from it (issue 35,
items 4 and 5).

Per session and tool name the proxy counts the results it reclaimed, the model's reads of
them (hidden extract calls by id), its re-runs (the same tool called again with the same
arguments) and its searches (extract calls with a `query`). Those counts reach the turn
records, `/metrics`, `/admin/savings` and the session detail; and once 5 of a tool's results
were reclaimed, a retrieval rate over 50 % stops the reclaiming of that tool's results in
that session (`auto_compact.adaptive_reclaim`, on by default).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from proxy.compaction.cache_aware import CacheAwareCompactor, _Sizes
from proxy.compaction.economics import Economics
from proxy.server.asked_back_metrics import MAX_TOOL_LABELS, LookBackMetrics
from proxy.session import asked_back
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.session.rebuild import Rebuild, rebuild, record_turn
from proxy.session.state import SessionState
from proxy.turn.asked_back_tally import Signatures, TurnLookBack
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import SYSTEM, is_summary_request
from tests.support.claude_model import PLACEHOLDER
from tests.support.fake_upstream import FakeUpstream, Reply


def _tool(name: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {"path": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = [_tool("read_file"), _tool("run_tests")]
RESULT_CHARS = 6_000
TURNS = 24


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- the pure parts ---------------------------------------------------------------------------


def test_a_signature_reads_arguments_canonically() -> None:
    a = _call("a", "read_file", '{"path": "x.py", "lines": [1, 2]}')
    b = _call("b", "read_file", '{"lines":[1,2],"path":"x.py"}')
    c = _call("c", "read_file", '{"path": "y.py", "lines": [1, 2]}')
    d = _call("d", "grep", '{"lines":[1,2],"path":"x.py"}')
    assert asked_back.signature(a) == asked_back.signature(b)
    assert len({asked_back.signature(x) for x in (a, c, d)}) == 3


def test_reruns_match_only_results_reclaimed_before_the_new_messages() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [_call("c1", "read_file", '{"path": "a"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "assistant", "tool_calls": [_call("c2", "read_file", '{"path": "b"}')]},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        # new: the same read of `a` again (reclaimed), and of `b` (not reclaimed)
        {"role": "assistant", "tool_calls": [_call("c3", "read_file", '{ "path":"a" }')]},
        {"role": "assistant", "tool_calls": [_call("c4", "read_file", '{"path": "b"}')]},
    ]
    keys = {2: "c1", 4: "c2"}
    assert asked_back.reruns(messages, keys, ["c1"], 5) == ["read_file"]
    assert asked_back.reruns(messages, keys, [], 5) == []


def _reads(count: int) -> tuple[list[dict[str, Any]], list[str]]:
    """A history of `count` reads of other files, and their results' reclaim keys."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(count):
        args = f'{{"path": "src/module_{n}.py", "limit": 200}}'
        messages.append({"role": "assistant", "tool_calls": [_call(f"c{n}", "read_file", args)]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "x"})
    return messages, [f"c{n}" for n in range(count)]


def _turn(messages: list[dict[str, Any]], state: SessionState, again: str) -> Rebuild:
    """The session's next request: its history, then a read with `again`'s arguments."""
    later = [*messages, {"role": "assistant", "tool_calls": [_call("new", "read_file", again)]}]
    return rebuild(later, state)


def test_a_session_digests_its_reclaimed_calls_once_until_they_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 500 reclaimed reads: the first turn that looks digests them all, the next ones (the same
    # reclaimed results) only their own calls, and a turn after a new reclaim all again.
    messages, keys = _reads(500)
    state = record_turn(rebuild(messages, SessionState(reclaimed=keys[:400])), total_tokens=1)
    digested: list[str] = []
    original = asked_back.signature

    def counting(call: Any) -> str:
        digested.append(str(call.get("id")))
        return original(call)

    monkeypatch.setattr(asked_back, "signature", counting)
    kept = Signatures()
    again = '{ "limit":200, "path":"src/module_250.py" }'  # another order and spacing
    for turn in range(3):
        digested.clear()
        looked = TurnLookBack()
        looked.started(_turn(messages, state, again), "s", kept)
        assert looked.reruns == {"read_file": 1}
        assert len(digested) == (401 if turn == 0 else 1), turn
    state.reclaimed = keys  # a later level 1 reclaimed 100 more
    digested.clear()
    looked = TurnLookBack()
    looked.started(_turn(messages, state, '{"path": "src/module_450.py", "limit": 200}'), "s", kept)
    assert looked.reruns == {"read_file": 1} and len(digested) == 501
    # Another session with the same ids and counts is not answered from this one's.
    digested.clear()
    looked = TurnLookBack()
    looked.started(_turn(messages, state, again), "t", kept)
    assert len(digested) == 501


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ([4, 4, 0], None),  # fewer than 5 reclaimed: nothing learned yet
        ([5, 0, 0], None),
        ([10, 1, 0], None),  # 10 %
        ([10, 1, 1], "double"),  # 20 %
        ([10, 3, 2], "double"),  # 50 %: not above
        ([10, 3, 3], "keep"),  # 60 %
        ([6, 0, 4], "keep"),  # re-runs count as reads do
    ],
)
def test_the_policy_follows_the_retrieval_rate(row: list[int], expected: str | None) -> None:
    assert asked_back.policy({"t": row}).get("t") == expected


def test_stored_counts_are_cleaned_and_bounded() -> None:
    many = {f"tool{i}": [1, 2, 3] for i in range(asked_back.MAX_TOOLS + 10)}
    tools, searches = asked_back.clean_counts({**many, "x": "bad"}, [1, -2, 3])
    assert len(tools) == asked_back.MAX_TOOLS and searches == [1, 0]
    counts = asked_back.Counts(tools, searches)
    assert counts.add("a-new-tool", asked_back.READS) == asked_back.OTHER
    state = SessionState.from_dict({"lookback": {"t": [1, True, "2"]}, "searches": None})
    asked_back.tidy(state)  # as a turn reads it
    assert state.lookback == {"t": [1, 0, 0]} and state.searches == []


def test_a_search_without_hits_is_told_apart() -> None:
    assert asked_back.found("3 hits:\n[id c1] turn 4, read_file: ...")
    assert not asked_back.found("No matches for 'foo'.")
    assert not asked_back.found("[Error] extract_compacted_tool_result needs a JSON argument")
    query = _call("x", EXTRACT_TOOL_NAME, '{"query": "foo"}')
    read = _call("y", EXTRACT_TOOL_NAME, '{"toolcall_id": "c1"}')
    assert asked_back.kind(query) == "search" and asked_back.kind(read) == "read"


def test_the_learned_policy_names_the_results_of_each_tool() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for i in range(8):
        name = "read_file" if i % 2 else "run_tests"
        messages.append({"role": "assistant", "tool_calls": [_call(f"c{i}", name, "{}")]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 400})
    counts = {"read_file": [5, 4, 0], "run_tests": [5, 0, 0]}
    keys = rebuild(messages, SessionState()).keys
    policy = asked_back.learned(counts, messages, lambda: keys)
    assert policy == {"c1": "keep", "c3": "keep", "c5": "keep", "c7": "keep"}

    def unasked() -> dict[int, str]:
        raise AssertionError("keys are read only when a tool has a policy")

    assert asked_back.learned({"run_tests": [5, 0, 0]}, messages, unasked) == {}


# -- through the proxy ------------------------------------------------------------------------


def _names(body: dict[str, Any]) -> dict[str, str]:
    return {
        call["id"]: call["function"]["name"]
        for m in body["messages"]
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }


class ReadsBack:
    """Each turn runs the tests and reads a file; whenever a read_file result is behind a
    placeholder it asks for it back, beside its own calls (run_tests results it never asks
    for). With `rerun`, it also runs the first tests again, as it did on its first turn."""

    def __init__(self, *, rerun: bool = False) -> None:
        self.turn = 0
        self.rerun = rerun
        self.asked: set[str] = set()
        self.placeholders: list[dict[str, int]] = []  # per request: tool -> placeholders

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply.text("## overview\nFiles are being read and tests run.")
        self.turn += 1
        names = _names(body)
        shown = [PLACEHOLDER.search(str(m.get("content"))) for m in body["messages"]]
        ids = [f[1] for f in shown if f is not None]
        seen: dict[str, int] = {}
        for i in ids:
            seen[names.get(i, "?")] = seen.get(names.get(i, "?"), 0) + 1
        self.placeholders.append(seen)
        own: list[dict[str, Any]] = [
            {"name": "run_tests", "arguments": {"path": f"t{self.turn}"}},
            {"name": "read_file", "arguments": {"path": f"f{self.turn}.py"}},
        ]
        if self.rerun and ids:
            own = [{"name": "run_tests", "arguments": {"path": "t1"}}]
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        wanted = [i for i in ids if names.get(i) == "read_file" and i not in self.asked]
        if EXTRACT_TOOL_NAME not in offered or not wanted or self.rerun:
            return Reply(tool_calls=own)
        self.asked.update(wanted)
        calls = [{"name": EXTRACT_TOOL_NAME, "arguments": {"toolcall_id": i}} for i in wanted]
        return Reply(tool_calls=[*calls, *own])


def _run(
    fake: FakeUpstream, make_proxy: MakeProxy, client_of: OpenAIClientFactory, **settings: Any
) -> tuple[Any, dict[str, Any]]:
    proxy = make_proxy(compactor="cache-aware", token_threshold=20_000, **settings)
    client = client_of(proxy, session="learn")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Fix the failing tests."},
    ]
    for n in range(TURNS):
        completion = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            assert call.function.name != EXTRACT_TOOL_NAME  # the client never sees them
            text = f"{call.function.name} {n} " + f"line {n} of {call.function.name}\n" * 300
            content = text[:RESULT_CHARS]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    rows = httpx.get(proxy.url + "/admin/sessions", timeout=30).json()["data"]
    (row,) = [r for r in rows if r["session"] == "learn"]
    detail = httpx.get(proxy.url + f"/admin/sessions/{row['id']}", timeout=30).json()
    return proxy, detail


def _reclaimed_after_first(detail: dict[str, Any]) -> dict[str, int]:
    """Each tool's results reclaimed by the compactions after the first."""
    records = [t["lookback"] for t in detail["turns"] if t.get("lookback", {}).get("reclaimed")]
    after = {"read_file": 0, "run_tests": 0}
    for record in records[1:]:
        for name, n in record["reclaimed"].items():
            after[name] = after.get(name, 0) + n
    return after


def _tool_row(detail: dict[str, Any], name: str) -> dict[str, Any]:
    (row,) = [r for r in detail["lookback"]["tools"] if r["tool"] == name]
    return row


def test_a_tool_the_model_keeps_reading_stops_being_reclaimed(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = model = ReadsBack()
    proxy, detail = _run(fake_upstream, make_proxy, openai_client)
    read, tests = _tool_row(detail, "read_file"), _tool_row(detail, "run_tests")
    assert read["policy"] == "keep" and tests["policy"] == "reclaim", detail["lookback"]
    assert read["reads"] >= asked_back.MIN_RECLAIMED
    # Once learned, no read_file result is reclaimed again; run_tests' still are.
    after = _reclaimed_after_first(detail)
    assert after["read_file"] == 0 and after["run_tests"] >= 3, after
    assert read["reclaimed"] < tests["reclaimed"]
    assert model.placeholders[-1].get("read_file", 0) == 0  # none in the last request
    # The turn records say what was asked back, and when.
    records = [t["lookback"] for t in detail["turns"] if "lookback" in t]
    assert sum(r.get("reads", {}).get("read_file", 0) for r in records) == read["reads"]
    assert sum(r.get("reclaimed", {}).get("run_tests", 0) for r in records) == tests["reclaimed"]
    # /metrics and /admin/savings count them.
    text = httpx.get(proxy.url + "/metrics", timeout=30).text
    reads = re.search(r'xun_lookback_reads_total\{tool="read_file"\} (\S+)', text)
    assert reads is not None and float(reads[1]) == read["reads"]
    assert re.search(r'xun_lookback_reclaimed_total\{tool="run_tests"\} [1-9]', text)
    report = httpx.get(proxy.url + "/admin/savings", timeout=30).json()["lookback"]
    assert report["sessions"] == 1
    (fleet,) = [r for r in report["tools"] if r["tool"] == "read_file"]
    assert fleet["reads"] == read["reads"] and fleet["reclaimed"] == read["reclaimed"]


def test_with_adaptive_reclaim_off_the_tool_is_reclaimed_as_before(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = model = ReadsBack()
    _, detail = _run(fake_upstream, make_proxy, openai_client, adaptive_reclaim=False)
    read = _tool_row(detail, "read_file")
    assert read["policy"] == "off" and read["rate"] is not None and read["rate"] > 0.5
    assert _reclaimed_after_first(detail)["read_file"] >= 3
    assert max(p.get("read_file", 0) for p in model.placeholders) > asked_back.MIN_RECLAIMED + 1


def test_a_re_run_of_a_reclaimed_result_is_counted(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = ReadsBack(rerun=True)
    proxy, detail = _run(fake_upstream, make_proxy, openai_client)
    tests = _tool_row(detail, "run_tests")
    assert tests["reruns"] >= 1 and tests["reads"] == 0
    records = [t["lookback"] for t in detail["turns"] if "lookback" in t]
    assert sum(r.get("reruns", {}).get("run_tests", 0) for r in records) == tests["reruns"]
    text = httpx.get(proxy.url + "/metrics", timeout=30).text
    assert re.search(r'xun_lookback_reruns_total\{tool="run_tests"\} [1-9]', text)


def test_metric_labels_of_tool_names_are_bounded() -> None:
    metrics = LookBackMetrics(CollectorRegistry())
    names = [f"tool_{i}" for i in range(MAX_TOOL_LABELS + 20)]
    labels = {metrics.tool_label(n) for n in names}
    assert len(labels) == MAX_TOOL_LABELS + 1 and "other" in labels
    assert metrics.tool_label("tool_0") == "tool_0"  # one already labelled stays itself
    assert metrics.tool_label('bad"name\n') == "other"
    assert metrics.tool_label("x" * 65) == "other"
    assert metrics.tool_label(asked_back.UNKNOWN) == "unknown"


def test_a_tool_asked_back_a_fifth_of_the_time_keeps_twice_as_many_results() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for i in range(30):
        messages.append({"role": "assistant", "tool_calls": [_call(f"c{i}", "read_file", "{}")]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 400})
    compactor = CacheAwareCompactor(toolcall_keep_max=4, keep_tool_ratio=1.0)

    def kept(counts: dict[str, list[int]]) -> int:
        rb = rebuild(messages, SessionState(lookback=counts))
        econ = Economics(reclaim_policy=asked_back.learned(counts, messages, lambda: rb.keys))
        plan = compactor._reclaim_plan(_Sizes(rb.conversation, 10_000), 10_000, econ)
        return 30 - len(plan.reclaim)

    assert kept({}) == 4
    assert kept({"read_file": [10, 3, 0]}) == 8  # 30 %: twice as many
    assert kept({"read_file": [10, 6, 0]}) == 30  # 60 %: none reclaimed
