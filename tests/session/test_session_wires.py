"""One session id used on two wires: each wire keeps its own session state, so switching back
and forth resets nothing (the session key holds the wire; Chat Completions sessions keep the
keys they were stored under). Through real uvicorn with the official `openai` and
`anthropic` SDKs, as one machine running Codex-style and Claude-style agents with the same
`X-Session-Id` default header would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.server.app import create_app
from proxy.session.identity import tenant_of
from proxy.store import SessionKey
from tests.support.claude_checks import messages_settings
from tests.support.fake_messages import FakeMessages, Turn
from tests.support.fake_upstream import Reply
from tests.support.servers import UvicornThread

SESSION = {"X-Session-Id": "shared-id"}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture
def fake(server: FakeMessages) -> FakeMessages:
    server.reset()
    return server


def test_switching_wires_keeps_each_wires_state(fake: FakeMessages) -> None:
    chat: list[Any] = [{"role": "user", "content": "first chat question"}]
    claude: list[Any] = [{"role": "user", "content": "first claude question"}]
    app = create_app(messages_settings(fake))
    with UvicornThread(app) as running:
        oai = openai.OpenAI(
            base_url=running.url + "/v1", api_key="sk-same", max_retries=0, default_headers=SESSION
        )
        ant = anthropic.Anthropic(
            base_url=running.url, auth_token="sk-same", max_retries=0, default_headers=SESSION
        )
        ids: dict[str, set[str]] = {"chat": set(), "messages": set()}
        with oai, ant:
            for n in range(3):
                fake.push(Reply.text(f"chat answer {n}"))
                raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=chat)
                ids["chat"].add(raw.headers["x-xun-session"])
                chat += [
                    {"role": "assistant", "content": f"chat answer {n}"},
                    {"role": "user", "content": f"chat question {n + 2}"},
                ]
                fake.push_turns(Turn.text(f"claude answer {n}"))
                answer = ant.messages.with_raw_response.create(
                    model="claude-opus-4-8", max_tokens=32, messages=claude
                )
                ids["messages"].add(answer.headers["x-xun-session"])
                claude += [
                    {"role": "assistant", "content": f"claude answer {n}"},
                    {"role": "user", "content": f"claude question {n + 2}"},
                ]
        running.settle()
        listed = httpx.get(running.url + "/admin/sessions").json()["data"]
        details = {
            row["wire"]: httpx.get(f"{running.url}/admin/sessions/{row['id']}").json()
            for row in listed
        }
    assert len(ids["chat"]) == len(ids["messages"]) == 1
    assert ids["chat"] != ids["messages"]
    assert sorted(details) == ["chat", "messages"]
    for wire, detail in details.items():
        assert len(detail["turns"]) == 3, wire  # three turns each: none lost to a reset
        assert detail["session"] == "shared-id"  # the header value, as the client sent it
    # A Chat Completions session keeps the key it was stored under before wires counted.
    assert ids["chat"] == {SessionKey(tenant_of("Bearer sk-same"), "shared-id").id}
