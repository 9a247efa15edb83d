"""Twenty requests of one session at once: one compaction, one summary call, nothing lost.

The session is grown past the threshold first (with the per-request threshold header set
high), then twenty requests carrying its history hit the proxy together. They all need a
compaction; the lease lets one of them compute it while the others wait and then use it.
Run against memory, SQLite and Redis stores (see conftest.store_url).
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from proxy.store import Store
from tests.conftest import MakeProxy, RunningProxy
from tests.scale.script import API_KEY, NumberedModel, read_state, session_key
from tests.support.agent import TOOLS, Agent, is_summary_request
from tests.support.fake_upstream import FakeUpstream

THRESHOLD = 8000
WARM_TURNS = 20
BURST = 20


def warm_up(proxy: RunningProxy, session: str) -> Agent:
    """Grow a session past THRESHOLD without compacting it."""
    headers = {"X-Session-Id": session, "x-xun-token-threshold": str(10**9)}
    client = openai.OpenAI(
        base_url=proxy.base_url, api_key=API_KEY, default_headers=headers, max_retries=0
    )
    with client:
        agent = Agent(client, output_size=2000)
        agent.run(WARM_TURNS)
    agent.client = None  # type: ignore[assignment]  # closed
    return agent


async def burst(proxy: RunningProxy, session: str, bodies: list[list[dict[str, Any]]]) -> list[Any]:
    client = openai.AsyncOpenAI(
        base_url=proxy.base_url,
        api_key=API_KEY,
        default_headers={"X-Session-Id": session},
        max_retries=0,
        timeout=60,
    )
    async with client:
        calls = [
            client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=messages, tools=TOOLS
            )
            for messages in bodies
        ]
        return await asyncio.gather(*calls)


def app_store(proxy: RunningProxy, url: str) -> Store | None:
    """A memory store only exists inside the app; other stores are opened afresh."""
    store: Store | None = proxy.app.state.store if url == "memory://" else None
    return store


@pytest.mark.parametrize("branching", [False, True], ids=["same-history", "sub-calls"])
async def test_twenty_at_once_compact_once(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, store_url: str, branching: bool
) -> None:
    # A slow summary keeps the race open: the other nineteen arrive while it runs.
    model = NumberedModel(summary_delay=0.3)
    fake_upstream.default = model
    proxy = make_proxy(store_url=store_url, token_threshold=THRESHOLD, escalation_rounds=0)
    session = "burst-branching" if branching else "burst"
    agent = await asyncio.to_thread(warm_up, proxy, session)
    key = session_key(session)
    proxy.settle()
    before, version_before = await read_state(store_url, key, app_store(proxy, store_url))
    assert before.total_tokens is not None and before.total_tokens > THRESHOLD
    assert before.summary is None
    seen = len(fake_upstream.chat_requests)

    if branching:  # parallel sub-calls: one shared history, a different last message each
        bodies = [
            [*agent.messages, {"role": "user", "content": f"sub-task {n}"}] for n in range(BURST)
        ]
    else:  # the same request twenty times (retries, fan-out of one prompt)
        bodies = [list(agent.messages) for _ in range(BURST)]
    responses = await burst(proxy, session, bodies)

    assert [r.status_code for r in responses] == [200] * BURST
    levels = sorted(r.headers["x-xun-compaction"] for r in responses)
    assert levels == ["none"] * (BURST - 1) + ["summary"]
    sent = fake_upstream.chat_requests[seen:]
    summaries = [r for r in sent if is_summary_request(r.json)]
    assert len(summaries) == 1  # one summary for one state, not twenty
    model_calls = [r for r in sent if not is_summary_request(r.json)]
    assert len(model_calls) == BURST
    for request in model_calls:  # every request went up with the one summary
        system = request.json["messages"][0]["content"]
        assert "Summary number 1 of the work." in system

    proxy.settle()
    state, version = await read_state(store_url, key, app_store(proxy, store_url))
    assert state.summary is not None and "Summary number 1 of the work." in state.summary
    assert state.summary_rounds == 1
    assert state.total_tokens is not None and state.total_tokens < THRESHOLD
    # One write for the compaction and one per request at most; every turn is recorded.
    assert version_before + 2 <= version <= version_before + 1 + BURST
    assert len(state.turns) == WARM_TURNS + BURST
    assert sum(t["compaction"] == "summary" for t in state.turns) == 1

    # The session carries on from the merged state without compacting again.
    nxt = await burst(proxy, session, [bodies[0]])
    assert nxt[0].headers["x-xun-compaction"] == "none"
    assert sum(is_summary_request(r.json) for r in fake_upstream.chat_requests[seen:]) == 1
