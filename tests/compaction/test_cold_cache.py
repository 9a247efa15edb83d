"""Cold-cache compaction through the proxy under real uvicorn, driven by the openai SDK: two
identical sessions over the threshold, where the cost-aware strategy waits while the prompt
cache is cheaper than a rewrite. After a short pause the warm one still waits; after a pause
longer than the provider keeps its cache, the cold one compacts at that request (its rewrite
is free), and its turn record says `cache_cold: true`. The proxy's clock is driven through
`app.state.clock`, never by sleeping."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.compaction.cache_life import lifetime_for
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import Agent, ModelScript
from tests.support.compacted import ADMIN_KEY, admin_headers
from tests.support.fake_upstream import FakeUpstream, Reply, count_prompt_tokens

THRESHOLD = 6000
MODEL = "claude-sonnet-4-6"  # a 5-minute cache, 0.1x reads, 1.25x writes
RULES = "Follow the repository's conventions and keep every change small. " * 200


class CachingModel(ModelScript):
    """Reports what a warm prompt cache reports: all but the newest part of the prompt read
    from the cache (the cost-aware strategy's observed hit ratio)."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = super().__call__(body)
        prompt = count_prompt_tokens(body)
        reply.usage_override = {
            "prompt_tokens_details": {"cached_tokens": max(0, prompt - 400), "audio_tokens": 0}
        }
        return reply


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def turns_of(url: str, session: str) -> list[dict[str, Any]]:
    """The turn records of a session (its `x-xun-session` id), from the admin API."""
    detail = httpx.get(f"{url}/admin/sessions/{session}", headers=admin_headers(), timeout=30)
    assert detail.status_code == 200, detail.text
    turns: list[dict[str, Any]] = detail.json()["turns"]
    return turns


def test_a_session_paused_past_the_cache_lifetime_compacts_where_a_warm_one_waits(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = CachingModel()
    # The tool joins with the first compaction, whose rewrite of the tools block makes a warm
    # session wait (with `always`, the default, the block never changes: it compacts sooner).
    proxy = make_proxy(
        admin_key=ADMIN_KEY,
        compactor="cache-aware",
        token_threshold=THRESHOLD,
        extract_tool="after_compaction",
    )
    clock = Clock()
    proxy.app.state.clock = clock
    agents = {}
    for name in ("warm", "cold"):
        agent = Agent(openai_client(proxy, session=name), output_size=1600, model=MODEL)
        agent.messages[0]["content"] += "\n" + RULES  # a large prefix: a rewrite costs a lot
        agents[name] = agent

    ids: dict[str, str] = {}

    def step(name: str, pause: float) -> str:
        clock.now += pause
        resp = agents[name].step()
        ids[name] = resp.headers["x-xun-session"]
        return str(resp.headers["x-xun-compaction"])

    # Both sessions, in step, 20 s apart, until the next request is over the threshold.
    while True:
        assert [step("warm", 10.0), step("cold", 10.0)] == ["none", "none"]
        last = turns_of(proxy.url, ids["warm"])[-1]
        if last["total_tokens"] > THRESHOLD + 500:
            break
        assert len(agents["warm"].messages) < 80, "never crossed the threshold"
    # Over the threshold now: after a short pause the strategy keeps waiting...
    assert step("warm", 30.0) == "none"
    # ... and after a pause longer than Anthropic's 5-minute cache it compacts at once.
    assert step("cold", lifetime_for(MODEL) + 60.0) in ("toolcall", "summary")
    warm, cold = turns_of(proxy.url, ids["warm"]), turns_of(proxy.url, ids["cold"])
    assert "cache_cold" not in warm[-1] and warm[-1]["compaction"] == "none"
    assert cold[-1]["cache_cold"] is True and cold[-1]["compaction"] in ("toolcall", "summary")
    assert not any(t.get("cache_cold") for t in cold[:-1])  # 20 s apart: the cache stayed warm
    assert cold[-1]["prompt_tokens"] < warm[-1]["prompt_tokens"]  # the cold request was smaller


class TickingClock(Clock):
    """A clock that moves a minute each time it is read: whichever read dates a turn shows."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[float] = []

    def __call__(self) -> float:
        self.now += 60.0
        self.reads.append(self.now)
        return self.now


def test_a_turn_is_dated_when_its_request_came(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """A turn's record carries the time its request came, and the cache's age is measured to
    it: the record is written after the answer is out, when the client may be sending its
    next request already (the viewer's test saw turn 2 dated at turn 3's time, and turn 3's
    cold cache missed)."""
    proxy = make_proxy(admin_key=ADMIN_KEY)
    clock = TickingClock()
    proxy.app.state.clock = clock
    agent = Agent(openai_client(proxy, session="dated"), output_size=200, model=MODEL)
    firsts = []
    for _ in range(3):
        before = len(clock.reads)
        session = agent.step().headers["x-xun-session"]
        firsts.append(clock.reads[before])  # the first read while the request was served
    turns = turns_of(proxy.url, session)
    assert [t["at"] for t in turns] == firsts
    # A minute between reads, under the 5-minute cache: no turn finds it cold.
    assert not any(t.get("cache_cold") for t in turns)
