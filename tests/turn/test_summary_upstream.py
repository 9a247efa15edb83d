"""Summaries on a summary upstream of their own (`--summary-upstream`, its own key): a second
fake OpenAI upstream gets every summary request, in Chat Completions whatever the session's
API, with its key and never the client's; the session's upstream gets none; and a summary
upstream that fails never fails the request."""

from __future__ import annotations

from typing import Any

from proxy.compact import SUMMARY_PROMPT
from proxy.compaction.summary_transcript import TRANSCRIPT_OPEN, transcript_body
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import Agent, ModelScript, is_summary_request
from tests.support.compacted import CLIENT_KEY, COMPACTING, compacted_session
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.wire_sessions import run_messages, wire_proxy

SUMMARY_KEY = "sk-summary-0123"


class CheapModel(ModelScript):
    """The summary model: a recognisable summary for every request."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        assert is_summary_request(body), body
        self.summaries += 1
        return Reply.text(f"## overview\nCheap summary {self.summaries}.")


def check_summary_requests(cheap: FakeUpstream) -> None:
    assert cheap.requests, "no summary reached the summary upstream"
    for request in cheap.requests:
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {SUMMARY_KEY}"
        assert "x-api-key" not in request.headers and CLIENT_KEY not in str(request.headers)
        body = request.json
        assert body["model"] == "cheap-1" and "tools" not in body
        system, user = body["messages"]
        assert system == {"role": "system", "content": SUMMARY_PROMPT}
        assert user["role"] == "user" and user["content"].startswith(TRANSCRIPT_OPEN)


def test_chat_summaries_go_to_the_summary_upstream_with_its_own_key(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    with FakeUpstream() as cheap:
        cheap.default = CheapModel()
        made = compacted_session(
            fake_upstream,
            make_proxy,
            openai_client,
            summary_model="cheap-1",
            summary_upstream=cheap.url,
            summary_upstream_api_key=f" {SUMMARY_KEY}\n",
        )
        made.agent.step()  # the summary is in the next request's system message
    assert made.levels[-1] == "summary"
    assert not [r for r in fake_upstream.requests if is_summary_request(r.json)]
    check_summary_requests(cheap)
    system = fake_upstream.requests[-1].json["messages"][0]["content"]
    assert "Cheap summary" in system


def test_a_messages_session_summarises_on_the_summary_upstream_in_chat_completions() -> None:
    with FakeUpstream() as cheap:
        cheap.default = CheapModel()
        settings = {
            "summary_model": "cheap-1",
            "summary_upstream": cheap.url,
            "summary_upstream_api_key": SUMMARY_KEY,
        }
        with wire_proxy(**settings) as proxy:
            run = run_messages(proxy, files=12)
            anthropic_paths = [r.path for r in proxy.messages.requests]
    assert "summary" in run.compactions, run.compactions
    assert all(p.startswith("/v1/messages") for p in anthropic_paths)
    check_summary_requests(cheap)


def test_a_failing_summary_upstream_never_fails_the_request(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    with FakeUpstream() as broken:
        broken.default = lambda body: Reply(status=503, error={"message": "overloaded"})
        fake_upstream.default = ModelScript()
        proxy = make_proxy(
            **COMPACTING, summary_upstream=broken.url, summary_upstream_api_key=SUMMARY_KEY
        )
        agent = Agent(openai_client(proxy, session="s-broken", api_key=CLIENT_KEY))
        levels = run_while(agent, lambda: not broken.requests)
        assert broken.requests  # the summary was tried there
    assert all(r.status_code == 200 for r in agent.responses)
    assert "summary" not in levels
    assert not [r for r in fake_upstream.requests if is_summary_request(r.json)]


def run_while(agent: Agent, going: Any, limit: int = 80) -> list[str]:
    """Turns until `going()` is false, then two more: each turn's compaction header."""
    levels: list[str] = []
    while going() and len(levels) < limit:
        agent.step()
        levels.append(agent.responses[-1].headers["x-xun-compaction"])
    for _ in range(2):
        agent.step()
        levels.append(agent.responses[-1].headers["x-xun-compaction"])
    return levels


def test_an_unreachable_summary_upstream_never_fails_the_request(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = ModelScript()
    proxy = make_proxy(**COMPACTING, summary_upstream="http://127.0.0.1:9/v1")
    agent = Agent(openai_client(proxy, session="s-gone"))
    levels = run_while(agent, lambda: len(agent.responses) < 40)
    assert all(r.status_code == 200 for r in agent.responses) and "summary" not in levels
    assert "toolcall" in levels  # level 1 goes on without the summary upstream
    assert not [r for r in fake_upstream.requests if is_summary_request(r.json)]


def test_the_transcript_carries_every_message_calls_and_results_as_text() -> None:
    chat_body = {
        "model": "m",
        "stream": False,
        "tools": [{"type": "function", "function": {"name": "read_file"}}],
        "tool_choice": "none",
        "messages": [
            {"role": "system", "content": SUMMARY_PROMPT},
            {"role": "system", "content": "Earlier summary."},
            {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "secret thoughts",
                "x_items": [{"type": "thinking", "signature": "sig"}],
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "print('a')"},
            {"role": "user", "content": "Write the summary now."},
        ],
    }
    body = transcript_body(chat_body)
    assert (
        body["model"] == "m"
        and body["stream"] is False
        and set(body)
        == {
            "model",
            "messages",
            "stream",
        }
    )
    system, user = body["messages"]
    assert system["content"] == f"{SUMMARY_PROMPT}\n\nEarlier summary."
    text = user["content"]
    assert text.startswith(TRANSCRIPT_OPEN) and text.endswith("Write the summary now.")
    for part in ("[user]\nFix the bug.", '[calls read_file call_1] {"path": "a.py"}'):
        assert part in text
    assert "[tool result call_1]\nprint('a')" in text
    assert "secret thoughts" not in text and "sig" not in text
