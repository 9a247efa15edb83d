"""Summaries written ahead across sessions (issue 34): they take at most a share of the
upstream connections, so a summary model that hangs never leaves a client's request without
one; and after failures a session tries again with backoff, then gets its summary soon after
the summary model is back.

Real proxies (uvicorn) in front of the faithful fake upstream, driven by the openai SDK, as in
tests/turn/test_summary_ahead_bounds.py (whose scripted model and agent these reuse).
"""

from __future__ import annotations

import time
from typing import Any

from proxy.turn.summary_ahead_limits import BACKOFF_CAP_TURNS
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import is_summary_request
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.turn.test_summary_ahead_bounds import SETTINGS, Agent, Model, ahead

POOL = 8
SESSIONS = 10  # more sessions with a summary hanging than the pool has connections
TURNS = 24  # a session of this test has started its summary by then (about turn 18)


class Hanging(Model):
    """Summaries never answer (until the proxy gives up); the agent's turns answer at once."""

    def __init__(self) -> None:
        super().__init__(delay=60.0)


def test_hanging_summaries_leave_the_pool_to_the_clients(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = model = Hanging()
    proxy = make_proxy(max_upstream_connections=POOL, pool_timeout=1.0, **SETTINGS)
    agents = [Agent(openai_client(proxy, session=f"pool-{n}")) for n in range(SESSIONS)]
    for agent in agents:
        for _ in range(TURNS):
            agent.step()  # raises on the proxy's 503 (no pool connection in time)
    # The default share is a quarter of the pool: two summaries hang, the others wait.
    assert len(model.summaries) == POOL // 4, model.summaries
    assert ahead(proxy, "deferred") >= 1
    # A request without a session header, and the first request of a fresh session.
    bare = openai_client(proxy, session=None)
    answer = bare.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.status_code == 200
    fresh = Agent(openai_client(proxy, session="pool-fresh"))
    for _ in range(3):
        fresh.step()
    assert fresh.compactions == ["none"] * 3


class Outage(Model):
    """Summaries fail (500) while `down` is set, and are written in 0.2 s otherwise."""

    def __init__(self) -> None:
        super().__init__(delay=0.2)
        self.down = True
        self.failed = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body) and self.down:
            with self.lock:
                self.failed += 1
            return Reply(status=500, error={"message": "down", "type": "server_error"})
        return super().__call__(body)


OUTAGE_TURNS = 30  # the summary model is down this many turns after the session's first try
RECOVERED_WITHIN = BACKOFF_CAP_TURNS + 4  # turns after the model is back


def test_after_failures_a_session_backs_off_and_gets_its_summary_once_the_model_is_back(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = model = Outage()
    proxy = make_proxy(**SETTINGS)
    agent = Agent(openai_client(proxy, session="outage"))
    while not model.failed:
        assert len(agent.latencies) < 40, agent.compactions
        agent.step()
    for _ in range(OUTAGE_TURNS):
        agent.step()
        time.sleep(0.05)  # a failed try has been answered before the next turn
    # Tried again with backoff (1, 2, 4, 8, 8 turns skipped), not on every turn of the outage.
    assert 3 <= model.failed <= 8, model.failed
    assert ahead(proxy, "backoff") >= OUTAGE_TURNS - 8
    assert set(agent.compactions) <= {"none", "toolcall"}
    model.down = False
    for _ in range(RECOVERED_WITHIN):
        agent.step()
        time.sleep(0.3)  # the summary is written between two turns
        if agent.compactions[-1] == "summary":
            break
    assert agent.compactions[-1] == "summary", agent.compactions[-RECOVERED_WITHIN:]
    assert ahead(proxy, "used") == 1
