"""Summaries prepared ahead are bounded (issue 28): one in flight per session across replicas
sharing a store, a stale one is dropped and counted, one in flight at shutdown is lost (nothing
half-written is ever used), and a failed one never fails a request.

Real proxies (uvicorn; SQLite store files, and the shared Redis for the replicas) in front of
the faithful fake upstream, driven by the openai SDK; the fake's summaries carry an id
(`SUMMARY-n`), so a test sees which of them reached the model.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.session.state import SessionState
from proxy.store import open_store
from proxy.store.base import SessionKey
from tests.conftest import MakeProxy, OpenAIClientFactory, RunningProxy
from tests.scale.conftest import SHARED_REDIS, drop_keys
from tests.server.test_shadow import TURNS as SHADOW_TURNS
from tests.server.test_shadow import chat_turn, read_next
from tests.support.agent import SYSTEM, TOOLS, is_summary_request
from tests.support.fake_upstream import FakeUpstream, Reply

SETTINGS: dict[str, Any] = {
    "token_threshold": 4000,
    "compactor": "cache-aware",
    "summary_ahead": True,
}
SUMMARY_ID = re.compile(r"SUMMARY-\d+")


class Model:
    """Two tool calls a turn at once; summaries after `delay` seconds (or a 500), each
    noted with when it arrived."""

    def __init__(self, delay: float, status: int = 200) -> None:
        self.delay = delay
        self.status = status
        self.turn = 0
        self.summaries: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            with self.lock:
                self.summaries.append(time.monotonic())
                n = len(self.summaries)
            if self.status != 200:
                return Reply(status=self.status, error={"message": "down", "type": "server_error"})
            return Reply.text(f"## overview\nSUMMARY-{n} of the work.", delay=self.delay)
        self.turn += 1
        calls = [("read_file", json.dumps({"path": f"src/f{self.turn}_{k}.py"})) for k in (1, 2)]
        return Reply(tool_calls=calls)


class Agent:
    """A stateless Chat Completions agent; each turn's latency and the proxy's header."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.history: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Read the source files one by one."},
        ]
        self.outputs = 0
        self.latencies: list[float] = []
        self.compactions: list[str] = []

    def step(self, client: openai.OpenAI | None = None) -> None:
        began = time.perf_counter()
        raw = (client or self.client).chat.completions.with_raw_response.create(
            model="gpt-4o", messages=self.history, tools=TOOLS
        )
        message = raw.parse().choices[0].message.model_dump(exclude_none=True)
        self.latencies.append(time.perf_counter() - began)
        self.compactions.append(raw.headers["x-xun-compaction"])
        self.history.append(message)
        for call in message.get("tool_calls") or []:
            self.outputs += 1
            line = f"output {self.outputs}: " + "x" * 60 + "\n"
            content = (line * 9)[:600]
            self.history.append({"role": "tool", "tool_call_id": call["id"], "content": content})


def ahead(proxy: RunningProxy, outcome: str) -> float:
    """The proxy's `xun_summary_ahead_total` for one outcome."""
    text = httpx.get(proxy.url + "/metrics").text
    line = f'xun_summary_ahead_total{{outcome="{outcome}"}} '
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))


def used_summaries(fake: FakeUpstream) -> set[str]:
    bodies = [r.json for r in fake.chat_requests if not is_summary_request(r.json)]
    return {s for body in bodies for s in SUMMARY_ID.findall(json.dumps(body))}


def stored(url: str, session: str) -> SessionState | None:
    async def read() -> SessionState | None:
        store = open_store(url)
        try:
            rows, _ = await store.list(limit=10)
            for row in rows:
                if row.key.session.startswith(session):
                    got = await store.get(SessionKey(row.key.tenant, row.key.session))
                    return None if got is None else SessionState.from_bytes(got.data)
            return None
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture(params=["sqlite", "redis"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store two replicas share: an SQLite file, or a private namespace of the shared Redis."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    prefix = f"xunahead:{uuid.uuid4().hex}:"
    yield f"{SHARED_REDIS}/13?prefix={prefix}"
    asyncio.run(drop_keys(f"{SHARED_REDIS}/13", prefix))


def test_replicas_write_one_summary_at_a_time(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    shared_store: str,
) -> None:
    # A summary takes 4 s: a turn that waited for one would take that long, while a turn
    # that does not takes milliseconds (under 2 s with the suite and two CPU hogs beside it).
    fake_upstream.default = model = Model(delay=4.0)
    url = shared_store
    replicas = [make_proxy(store_url=url, **SETTINGS) for _ in range(2)]
    clients = [openai_client(p, session="replicated") for p in replicas]
    agent = Agent(clients[0])
    for turn in range(36):
        agent.step(clients[turn % 2])  # turns alternate between the two processes
        time.sleep(0.3)
    time.sleep(4.5)
    assert max(agent.latencies[1:]) < 2.0, agent.latencies
    used = used_summaries(fake_upstream)
    assert len(used) >= 1 and len(model.summaries) <= len(used) + 3, (used, model.summaries)
    # Never two at once: each summary request came after the one before had been answered.
    gaps = [b - a for a, b in zip(model.summaries, model.summaries[1:], strict=False)]
    assert all(gap >= 3.9 for gap in gaps), gaps
    assert sum(ahead(p, "started") for p in replicas) >= len(model.summaries)


def test_a_stale_summary_is_dropped_and_counted(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = Model(delay=0.2)
    proxy = make_proxy(**SETTINGS)
    agent = Agent(openai_client(proxy, session="stale"))
    lengths = []
    while ahead(proxy, "ready") < 1:
        assert len(agent.latencies) < 40, agent.compactions
        lengths.append(len(agent.history))
        agent.step()
        time.sleep(0.3)
    assert ahead(proxy, "used") == 0
    # The client goes back before the messages the summary covers, and on differently.
    del agent.history[lengths[-3] :]
    for _ in range(6):
        agent.step()
    assert ahead(proxy, "unused") >= 1
    assert "SUMMARY-1" not in used_summaries(fake_upstream)


def test_a_summary_in_flight_at_shutdown_is_lost(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    tmp_path: Path,
) -> None:
    fake_upstream.default = model = Model(delay=3.0)
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    proxy = make_proxy(store_url=url, **SETTINGS)
    agent = Agent(openai_client(proxy, session="restarted"))
    while not model.summaries:
        assert len(agent.latencies) < 40, agent.compactions
        agent.step()
        time.sleep(0.2)
    proxy.restart()  # the summary is still being written
    state = stored(url, "restarted")
    assert state is not None and state.ahead is None
    time.sleep(3.5)  # the abandoned summary's answer has come and gone
    state = stored(url, "restarted")
    assert state is not None and state.ahead is None, "a summary nobody waited for was stored"
    for _ in range(4):
        agent.step(openai_client(proxy, session="restarted"))
    assert "SUMMARY-1" not in used_summaries(fake_upstream)


def test_a_failed_summary_never_fails_a_request(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = model = Model(delay=0.0, status=500)
    proxy = make_proxy(**SETTINGS)
    agent = Agent(openai_client(proxy, session="failing"))
    for _ in range(24):
        agent.step()
        time.sleep(0.05)
    assert model.summaries, "no summary was tried"
    assert ahead(proxy, "failed") >= 1
    assert set(agent.compactions) <= {"none", "toolcall"}
    assert max(agent.latencies[1:]) < 1.0


def test_shadow_mode_writes_no_summary_ahead(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """Shadow mode's summaries are stand-ins made at once: its crossings show their summary
    at once, with summaries ahead on, and nothing is written in the background."""
    fake_upstream.default = read_next
    proxy = make_proxy(token_threshold=3000, toolcall_keep_max=2, mode="shadow", summary_ahead=True)
    client = openai_client(proxy, session="shadow-ahead")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    compactions = [chat_turn(client, messages, stream=False) for _ in range(SHADOW_TURNS * 2)]
    assert "summary" in compactions, compactions
    assert not any(is_summary_request(r.json) for r in fake_upstream.chat_requests)
    assert ahead(proxy, "waiting") == 0 and ahead(proxy, "started") == 0


def test_a_summary_written_ahead_is_billed_to_the_turn_that_uses_it(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """Its request is made after one turn ended and before the turn that applies it: what the
    upstream billed for it joins that turn's savings (and so `/admin/savings`), once."""
    fake_upstream.default = model = Model(delay=1.2)
    proxy = make_proxy(**SETTINGS)
    agent = Agent(openai_client(proxy, session="billed-ahead"))
    while ahead(proxy, "used") < 1:
        assert len(agent.latencies) < 40, agent.compactions
        agent.step()
        time.sleep(0.3)
    summaries = [r.json for r in fake_upstream.chat_requests if is_summary_request(r.json)]
    assert len(summaries) == len(model.summaries) == 1  # one written, the one used
    proxy.settle()
    totals = httpx.get(proxy.url + "/admin/savings").json()["totals"]
    assert totals["summary_prompt_tokens"] == fake_upstream.prompt_tokens(summaries[0]) > 0
