"""Usage numbers the upstream cannot have meant are not numbers (issue 34, item 4).

Before: `prompt_tokens: 2**62` made every later save of the session fail (its turns went
unrecorded) and the savings report showed about 1e19 tokens saved; a cached count larger than
the prompt showed -$5,000 saved, a huge cache-write count -$10M. Now each such value counts
as unknown for its turn: on every wire, through real uvicorn against the wire's fake
reporting it, the session's next turns are saved and `/admin/savings` stays sane.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.session.history import token_count
from proxy.session.savings_record import add
from proxy.wire.base import Usage
from tests.support.compacted import admin_headers
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.wire_sessions import MESSAGES_MODEL, RESPONSES_MODEL, wire_proxy

TURNS = 3
HUGE = 2**62

CHAT_USAGES = {
    "prompt 2**62": {"prompt_tokens": HUGE, "total_tokens": 20},
    "cached over the prompt": {"prompt_tokens_details": {"cached_tokens": 2 * 10**9}},
    "cache writes over the prompt": {"prompt_tokens_details": {"cache_write_tokens": 3 * 10**12}},
}
RESPONSES_USAGES = {
    "input 2**62": {"input_tokens": HUGE, "total_tokens": 20},
    "cached over the input": {"input_tokens_details": {"cached_tokens": 2 * 10**9}},
    "cache writes over the input": {"input_tokens_details": {"cache_write_tokens": 3 * 10**12}},
}
MESSAGES_USAGES = {
    "input 2**62": {"input_tokens": HUGE},
    "cache reads 2**62": {"cache_read_input_tokens": HUGE},
    "cache writes 2**62": {"cache_creation_input_tokens": HUGE},
}


def check_report(url: str, session: str, *, counted: int = TURNS) -> None:
    """The turns after the bad usage saved, and totals a person could believe (`counted`:
    the turns recorded; a Messages reply whose usage is unreadable, as with any value that is
    not a count, records no turn)."""
    with httpx.Client(base_url=url, headers=admin_headers(), timeout=30) as http:
        report = http.get("/admin/savings", params={"by": "session"})
        assert report.status_code == 200, report.text
        (group,) = report.json()["groups"]
        detail = http.get(f"/admin/sessions/{group['key']}")
        assert detail.status_code == 200, detail.text
    turns = detail.json()["turns"]
    assert len(turns) == counted, turns
    totals = report.json()["totals"]
    assert totals["requests"] == counted, totals
    for name in ("prompt_tokens_sent", "prompt_tokens_direct", "tokens_saved"):
        assert abs(totals[name]) < 10**6, totals
    assert abs(totals["cost_saved"] or 0) < 10, totals
    assert group["session"] == session and group["requests"] == counted


def run_turns(send: Callable[[list[dict[str, Any]]], httpx.Response]) -> None:
    history: list[dict[str, Any]] = []
    for n in range(TURNS):
        history.append({"role": "user", "content": f"Question {n}: what is in the file?"})
        resp = send(history)
        assert resp.status_code == 200, resp.text
        history.append({"role": "assistant", "content": f"Answer {n}."})


@pytest.mark.parametrize("usage", list(CHAT_USAGES.values()), ids=list(CHAT_USAGES))
def test_chat_usage_out_of_range_leaves_the_savings_sane(usage: dict[str, Any]) -> None:
    with FakeUpstream() as fake, wire_proxy(upstream_base_url=fake.url) as proxy:
        fake.push(Reply.text("Answer 0.", usage_override=usage))
        headers = {"authorization": "Bearer sk-client", "session-id": "usage-chat"}

        def send(history: list[dict[str, Any]]) -> httpx.Response:
            body = {"model": "gpt-4o", "messages": history}
            return httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=headers)

        run_turns(send)
        proxy.server.settle()
        check_report(proxy.url, "usage-chat")


@pytest.mark.parametrize("usage", list(RESPONSES_USAGES.values()), ids=list(RESPONSES_USAGES))
def test_responses_usage_out_of_range_leaves_the_savings_sane(usage: dict[str, Any]) -> None:
    with wire_proxy() as proxy:
        proxy.responses.push_turns(ResponsesTurn(text="Answer 0.", usage_override=usage))
        headers = {"authorization": "Bearer sk-client", "session-id": "usage-responses"}

        def send(history: list[dict[str, Any]]) -> httpx.Response:
            body = {"model": RESPONSES_MODEL, "input": history, "store": False}
            return httpx.post(proxy.url + "/v1/responses", json=body, headers=headers)

        run_turns(send)
        proxy.server.settle()
        check_report(proxy.url, "usage-responses")


@pytest.mark.parametrize("usage", list(MESSAGES_USAGES.values()), ids=list(MESSAGES_USAGES))
def test_messages_usage_out_of_range_leaves_the_savings_sane(usage: dict[str, Any]) -> None:
    with wire_proxy() as proxy:
        text = [{"type": "text", "text": "Answer 0."}]
        proxy.messages.push_turns(MessagesTurn(content=text, usage_override=usage))
        headers = {
            "x-api-key": "sk-ant-client",
            "anthropic-version": "2023-06-01",
            "x-claude-code-session-id": "usage-messages",
        }

        def send(history: list[dict[str, Any]]) -> httpx.Response:
            body = {"model": MESSAGES_MODEL, "max_tokens": 256, "messages": history}
            return httpx.post(proxy.url + "/v1/messages", json=body, headers=headers)

        run_turns(send)
        proxy.server.settle()
        check_report(proxy.url, "usage-messages", counted=TURNS - 1)


# -- the rules themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [2**53 + 1, HUGE])
def test_a_value_that_is_not_a_believable_count_is_none(value: Any) -> None:
    assert token_count(value) is None
    assert token_count(2**53) == 2**53


def test_a_part_larger_than_its_prompt_is_unknown() -> None:
    assert Usage(prompt=100, cached=101, written=5) == Usage(prompt=100, written=5)
    assert Usage(prompt=100, cached=60, written=50) == Usage(prompt=100, cached=60)
    assert Usage(prompt=None, cached=5, written=5) == Usage()
    assert Usage(total=3 * 2**53, prompt=3 * 2**53, cached=1) == Usage()


def test_savings_totals_stop_at_what_the_state_can_be_written_with() -> None:
    assert add([2**53 - 1, 5], [2**53 - 1, 5]) == [2**53, 10]
