"""The compacting path end to end: real uvicorn, the official openai SDK, the fake upstream.

Every assertion is about what the fake upstream received (the proxy's view of the model) or
what the client got back.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.compact import placeholder_for
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.agent import SYSTEM, Agent, ModelScript, model_requests, summary_count
from tests.support.fake_upstream import FakeUpstream, Reply


@pytest.fixture
def client_for(openai_client: Any) -> Any:
    def make(proxy: Any, session: str = "s1", key: str = "sk-test-a") -> openai.OpenAI:
        return openai_client(proxy, session=session, api_key=key)

    return make


def tool_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


@pytest.fixture
def script(fake_upstream: FakeUpstream) -> ModelScript:
    s = ModelScript()
    fake_upstream.default = s
    return s


@pytest.mark.parametrize("extract_tool", [None, "after_compaction"])
def test_below_threshold_is_untouched(
    fake_upstream: FakeUpstream,
    make_proxy: Any,
    script: ModelScript,
    client_for: Any,
    extract_tool: str | None,
) -> None:
    options = {"extract_tool": extract_tool} if extract_tool else {}
    proxy = make_proxy(token_threshold=1_000_000, **options)
    agent = Agent(client_for(proxy))
    agent.run(4)
    sent = model_requests(fake_upstream.chat_requests)
    assert len(sent) == 4
    # By default (always) ours is in the tools from the first turn on, last, so the tool list
    # never changes; with `after_compaction` they are the client's own until a compaction.
    tools = ["read_file"] if extract_tool else ["read_file", "extract_compacted_tool_result"]
    for request, n in zip(sent, (2, 4, 6, 8), strict=True):
        # Exactly the client's history (the SDK dump with its null fields included).
        assert request.json["messages"] == agent.messages[:n]
        assert tool_names(request.json) == tools
    assert agent.responses[-1].headers["x-xun-compaction"] == "none"
    assert agent.responses[-1].headers["x-xun-session"]


def test_the_extract_tool_can_wait_for_the_first_compaction(
    fake_upstream: FakeUpstream, make_proxy: Any, script: ModelScript, client_for: Any
) -> None:
    proxy = make_proxy(token_threshold=8000, extract_tool="after_compaction")
    agent = Agent(client_for(proxy), output_size=2000)
    while agent.responses == [] or agent.responses[-1].headers["x-xun-compaction"] == "none":
        agent.step()
        assert len(agent.responses) < 40
    sent = model_requests(fake_upstream.chat_requests)
    assert all(tool_names(r.json) == ["read_file"] for r in sent[:-1])
    assert tool_names(sent[-1].json) == ["read_file", "extract_compacted_tool_result"]


def test_a_session_without_tools_gets_no_tool_before_compacting(
    fake_upstream: FakeUpstream, make_proxy: Any, client_for: Any
) -> None:
    proxy = make_proxy(token_threshold=1_000_000)
    client = client_for(proxy, session="plain", key="sk-test")
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert "tools" not in fake_upstream.chat_requests[-1].json


def test_level1_reclaims_all_but_newest_12(
    fake_upstream: FakeUpstream, make_proxy: Any, script: ModelScript, client_for: Any
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = Agent(client_for(proxy), output_size=2000)
    while agent.responses == [] or agent.responses[-1].headers["x-xun-compaction"] == "none":
        agent.step()
        assert len(agent.responses) < 40
    assert agent.responses[-1].headers["x-xun-compaction"] == "toolcall"
    body = model_requests(fake_upstream.chat_requests)[-1].json
    contents = tool_contents(body)
    client_tools = [m for m in agent.messages[: len(body["messages"])] if m["role"] == "tool"]
    assert len(contents) == len(client_tools) > 12
    reclaimed = len(contents) - 12
    for sent, original in zip(contents[:reclaimed], client_tools, strict=False):
        assert sent == placeholder_for(original["tool_call_id"])
    assert contents[reclaimed:] == [m["content"] for m in client_tools[reclaimed:]]
    assert tool_names(body) == ["read_file", EXTRACT_TOOL_NAME]
    assert summary_count(fake_upstream.chat_requests) == 0


def test_escalates_to_summary_after_two_cheap_rounds(
    fake_upstream: FakeUpstream, make_proxy: Any, script: ModelScript, client_for: Any
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = Agent(client_for(proxy), output_size=2000)
    levels: list[str] = []
    while "summary" not in levels:
        agent.step()
        levels.append(agent.responses[-1].headers["x-xun-compaction"])
        assert len(levels) < 80
    assert [lv for lv in levels if lv != "none"] == ["toolcall", "toolcall", "summary"]
    assert summary_count(fake_upstream.chat_requests) == 1
    body = model_requests(fake_upstream.chat_requests)[-1].json
    system = body["messages"][0]
    assert system["role"] == "system"
    assert "Earlier conversation history has been compacted" in system["content"]
    assert "Summary number 1 of the work." in system["content"]
    assert system["content"].endswith(SYSTEM)  # the client's system prompt kept after it
    assert [m["role"] for m in body["messages"]].count("system") == 1
    assert any(m["role"] == "user" for m in body["messages"][1:])
    # The turns after a summary keep it, until the next one is needed.
    agent.step()
    nxt = model_requests(fake_upstream.chat_requests)[-1].json
    assert nxt["messages"][0] == system


def test_extract_only_round_is_answered_by_the_proxy(
    fake_upstream: FakeUpstream, make_proxy: Any, script: ModelScript, client_for: Any
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = Agent(client_for(proxy), output_size=2000)
    while agent.responses == [] or agent.responses[-1].headers["x-xun-compaction"] == "none":
        agent.step()
    first_tool = next(m for m in agent.messages if m["role"] == "tool")
    fake_upstream.push(
        Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": first_tool["tool_call_id"]}),
        Reply.text("I have what I needed."),
    )
    before = len(fake_upstream.chat_requests)
    resp = agent.step()
    completion = resp.parse()
    assert completion.choices[0].message.content == "I have what I needed."
    assert completion.choices[0].message.tool_calls is None
    sent = fake_upstream.chat_requests[before:]
    assert len(sent) == 2
    second = sent[1].json["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == EXTRACT_TOOL_NAME
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": second[-2]["tool_calls"][0]["id"],
        "content": first_tool["content"],
    }
    # The internal round goes upstream again at its place on later turns (the client never
    # saw it): the next request is the last one plus what the client appended.
    agent.messages.append({"role": "user", "content": "continue"})
    nxt = agent.step()
    assert nxt.headers["x-xun-compaction"] == "none"
    later = fake_upstream.chat_requests[-1].json["messages"]
    assert later[: len(second)] == second
    assert later[len(second)]["content"] == "I have what I needed."
    assert later[len(second) + 1 :] == [{"role": "user", "content": "continue"}]


@pytest.mark.parametrize("stream", [False, True])
def test_mixed_round_hides_extract_and_reinserts_it(
    fake_upstream: FakeUpstream, make_proxy: Any, script: ModelScript, client_for: Any, stream: bool
) -> None:
    proxy = make_proxy(token_threshold=8000)
    client = client_for(proxy)
    agent = Agent(client, output_size=2000)
    while agent.responses == [] or agent.responses[-1].headers["x-xun-compaction"] == "none":
        agent.step()
    first_tool = next(m for m in agent.messages if m["role"] == "tool")
    fake_upstream.push(
        Reply(
            tool_calls=[
                {
                    "name": EXTRACT_TOOL_NAME,
                    "arguments": {"toolcall_id": first_tool["tool_call_id"]},
                    "id": "call_x1",
                },
                {"name": "read_file", "arguments": {"path": "b.py"}, "id": "call_r1"},
            ]
        )
    )
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o", messages=agent.messages, tools=agent_tools(), stream=True
            )
        )
        deltas = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or []]
        assert {d.index for d in deltas} == {0}
        assert {d.id for d in deltas if d.id} == {"call_r1"}
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        agent.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_r1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"b.py"}'},
                    }
                ],
            }
        )
    else:
        completion = client.chat.completions.create(
            model="gpt-4o", messages=agent.messages, tools=agent_tools()
        )
        calls = completion.choices[0].message.tool_calls or []
        assert [c.id for c in calls] == ["call_r1"]
        agent.messages.append(completion.choices[0].message.model_dump())
    agent.messages.append({"role": "tool", "tool_call_id": "call_r1", "content": "contents of b"})
    agent.step()
    sent = fake_upstream.chat_requests[-1].json["messages"]
    anchor = next(
        i
        for i, m in enumerate(sent)
        if any(c["id"] == "call_r1" for c in m.get("tool_calls") or [])
    )
    assert [c["id"] for c in sent[anchor]["tool_calls"]] == ["call_r1", "call_x1"]
    assert sent[anchor + 1] == {
        "role": "tool",
        "tool_call_id": "call_x1",
        "content": first_tool["content"],
    }
    assert sent[anchor + 2]["tool_call_id"] == "call_r1"


def agent_tools() -> list[dict[str, Any]]:
    from tests.support.agent import TOOLS

    return TOOLS


def test_two_tenants_with_one_session_id_are_apart(
    fake_upstream: FakeUpstream, make_proxy: Any, script: ModelScript, client_for: Any
) -> None:
    proxy = make_proxy(token_threshold=8000)
    a = Agent(client_for(proxy, "shared", key="sk-tenant-a"), output_size=2000)
    while a.responses == [] or a.responses[-1].headers["x-xun-compaction"] == "none":
        a.step()
    b = Agent(client_for(proxy, "shared", key="sk-tenant-b"), output_size=2000)
    b.run(3)
    assert b.responses[-1].headers["x-xun-session"] != a.responses[-1].headers["x-xun-session"]
    assert model_requests(fake_upstream.chat_requests)[-1].json["messages"] == b.messages[:6]
