"""Sessions over time: history edits, restarts, the projected and reactive triggers, and a
summary request that must itself be split to fit a small model window."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compact import placeholder_for
from tests.support.agent import SYSTEM, Agent, ModelScript, model_requests, summary_count
from tests.support.fake_upstream import FakeUpstream


@pytest.fixture
def script(fake_upstream: FakeUpstream) -> ModelScript:
    s = ModelScript()
    fake_upstream.default = s
    return s


def compact_until(agent: Agent, level: str = "toolcall", limit: int = 60) -> None:
    for _ in range(limit):
        agent.step()
        if agent.responses[-1].headers["x-xun-compaction"] == level:
            return
    raise AssertionError(f"no {level} compaction within {limit} turns")


def last_sent(fake: FakeUpstream) -> list[dict[str, Any]]:
    return list(model_requests(fake.chat_requests)[-1].json["messages"])


def test_retry_of_the_last_turn_keeps_the_compaction(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = Agent(openai_client(proxy, session="retry"), output_size=2000)
    compact_until(agent)
    # Retry: drop the last reply (and its tool result) and send the same history again.
    agent.messages = agent.messages[:-2]
    agent.step()
    sent = last_sent(fake_upstream)
    first = next(m for m in agent.messages if m["role"] == "tool")
    assert placeholder_for(first["tool_call_id"]) in [m.get("content") for m in sent]


def test_edit_before_the_summary_starts_over(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = Agent(openai_client(proxy, session="edit"), output_size=2000)
    compact_until(agent, "summary")
    # The user rewrites their first message: the summary no longer describes this history.
    agent.messages[1] = {"role": "user", "content": "A different task altogether."}
    agent.messages = agent.messages[:6]
    agent.step()
    sent = last_sent(fake_upstream)
    assert "compacted" not in sent[0]["content"]
    assert sent[:3] == agent.messages[:3]
    # Results still in the request may stay reclaimed: their originals are right there.
    for got, mine in zip(sent[3:6], agent.messages[3:6], strict=True):
        assert got["content"] in (mine["content"], placeholder_for(mine.get("tool_call_id", "")))


def test_branch_after_the_summary_keeps_it(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = Agent(openai_client(proxy, session="branch"), output_size=2000)
    compact_until(agent, "summary")
    agent.step()
    summary_system = last_sent(fake_upstream)[0]
    # Branch: the client replaces the newest tool result with another one.
    agent.messages[-1] = {**agent.messages[-1], "content": "a different outcome"}
    agent.step()
    sent = last_sent(fake_upstream)
    assert sent[0] == summary_system
    assert "a different outcome" in [m.get("content") for m in sent]


def test_state_survives_a_restart_with_sqlite(
    fake_upstream: FakeUpstream,
    make_proxy: Any,
    openai_client: Any,
    script: ModelScript,
    tmp_path: Any,
) -> None:
    proxy = make_proxy(token_threshold=8000, store_url=f"sqlite:///{tmp_path}/sessions.db")
    agent = Agent(openai_client(proxy, session="restart"), output_size=2000)
    compact_until(agent)
    agent.step()
    before = last_sent(fake_upstream)
    proxy.restart()
    agent.messages.append({"role": "user", "content": "still there?"})
    agent.step()
    after = last_sent(fake_upstream)
    assert after[: len(before)] == before  # same placeholders, same view
    assert agent.responses[-1].headers["x-xun-compaction"] in ("none", "toolcall")


def test_projected_trigger_compacts_before_a_huge_result_overflows(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    proxy = make_proxy(token_threshold=20_000)
    agent = Agent(openai_client(proxy, session="huge"), output_size=2000)
    agent.run(14)  # about 7.5k tokens: far below the threshold
    assert {r.headers["x-xun-compaction"] for r in agent.responses} == {"none"}
    agent.messages[-1]["content"] = "y" * 60_000  # one tool result of ~15k tokens
    agent.step()
    assert agent.responses[-1].headers["x-xun-compaction"] != "none"
    assert sum(len(m.get("content") or "") for m in last_sent(fake_upstream)) < 80_000


def test_reactive_compaction_after_a_context_length_error(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    fake_upstream.context_window = 6000
    proxy = make_proxy(token_threshold=1_000_000)
    agent = Agent(openai_client(proxy, session="reactive"), output_size=2000)
    levels = []
    for _ in range(25):
        agent.step()  # raises if any turn reached the client as an error
        levels.append(agent.responses[-1].headers["x-xun-compaction"])
    assert any(lv != "none" for lv in levels)
    refused = [
        r for r in fake_upstream.chat_requests if r.json and r.json.get("messages") and r.completed
    ]
    assert refused


def test_a_refusal_that_reclaiming_cannot_fix_escalates_to_a_summary(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    # Level 1 keeps 50 results here, so reclaiming frees nothing: the ladder must go on to a
    # summary within the same client request, and no turn may reach the client refused.
    fake_upstream.context_window = 6000
    proxy = make_proxy(token_threshold=1_000_000, toolcall_keep_max=50, summary_keep_max=4)
    agent = Agent(openai_client(proxy, session="escalate"), output_size=2000)
    levels = []
    for _ in range(20):
        agent.step()  # raises if any turn reached the client as an error
        levels.append(agent.responses[-1].headers["x-xun-compaction"])
    assert "summary" in levels
    assert summary_count(fake_upstream.chat_requests) >= 1


def test_summary_is_split_when_it_does_not_fit_the_window(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    # The main request is refused for length; the summary of everything is refused too
    # (it adds the instructions), so it must be made in pieces.
    fake_upstream.context_window = 4500
    proxy = make_proxy(token_threshold=1_000_000, toolcall_keep_max=50, summary_keep_max=0)
    agent = Agent(openai_client(proxy, session="small-window"), output_size=2000)
    compact_until(agent, "summary", limit=30)
    assert summary_count(fake_upstream.chat_requests) >= 3  # refused whole, then in pieces
    assert all(r.completed for r in fake_upstream.chat_requests)
    system = last_sent(fake_upstream)[0]["content"]
    assert "Summary number" in system and system.endswith(SYSTEM)


def test_a_short_side_request_under_the_session_id_leaves_the_session_alone(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, script: ModelScript
) -> None:
    # Agents send side calls under their session id (Claude Code titles its sessions with
    # one): a two-message conversation of its own must not reset the compacted session.
    proxy = make_proxy(token_threshold=8000)
    client = openai_client(proxy, session="with-side-calls")
    agent = Agent(client, output_size=2000)
    compact_until(agent, "summary")
    summaries = summary_count(fake_upstream.chat_requests)
    summary = last_sent(fake_upstream)[0]["content"]
    side = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Name this session in 3 words."}]
    )
    assert side.headers["x-xun-compaction"] == "none"
    assert model_requests(fake_upstream.chat_requests)[-1].json["messages"] == [
        {"role": "user", "content": "Name this session in 3 words."}
    ]
    agent.step()
    # The conversation's next turn finds its summary as it was: not lost, not made again.
    assert agent.responses[-1].headers["x-xun-compaction"] == "none"
    assert summary_count(fake_upstream.chat_requests) == summaries
    assert last_sent(fake_upstream)[0]["content"] == summary
