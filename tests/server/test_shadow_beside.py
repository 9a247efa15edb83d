"""Shadow mode's work runs beside the pass-through, never before it (issue 34).

A real proxy (uvicorn, the openai SDK, the faithful fake upstream) in shadow mode over a
session store whose reads wait at a gate, as a locked SQLite file makes them wait (its busy
timeout): the shadow turn is stuck on its first read. The request must reach the upstream
while it is (the fake notes how many store reads were done when the request came, then opens
the gate), streamed and not; the shadow turn is then recorded once it is done. Past its time
budget a stuck shadow turn is abandoned and counted, and the request is only passed through.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from proxy.store.base import SessionKey, StoredSession
from proxy.store.memory import MemoryStore
from tests.conftest import MakeProxy, OpenAIClientFactory, RunningProxy
from tests.server.test_shadow import chat_turn, only_session, read_next, shadow_turns
from tests.support.fake_upstream import FakeUpstream, Reply

GATE_TIMEOUT = 20.0  # a read that is never let through goes on after this (never in a pass)


class GatedStore(MemoryStore):
    """A memory store whose reads wait until `gate` is open; `reads` counts those done."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.reads = 0

    async def get(self, key: SessionKey) -> StoredSession | None:
        await asyncio.to_thread(self.gate.wait, GATE_TIMEOUT)
        self.reads += 1
        return await super().get(key)


class Upstream:
    """The fake's model: notes the store reads done when each request came, then opens the
    gate when asked to (the shadow turn may go on only once the request is upstream)."""

    def __init__(self, store: GatedStore, *, open_gate: bool) -> None:
        self.store = store
        self.open_gate = open_gate
        self.reads_seen: list[int] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.reads_seen.append(self.store.reads)
        if self.open_gate:
            self.store.gate.set()
        return read_next(body)


def shadow_idle(proxy: RunningProxy) -> None:
    """Wait for the proxy's shadow work in flight, then for its saves."""
    proxy.server.call(proxy.app.state.shadow.idle())
    proxy.settle()


def abandoned(proxy: RunningProxy) -> float:
    text = httpx.get(proxy.url + "/metrics").text
    rows = [r for r in text.splitlines() if r.startswith("xun_shadow_abandoned_total ")]
    return sum(float(r.split()[-1]) for r in rows)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_request_goes_upstream_before_the_shadow_turn_is_done(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
) -> None:
    store = GatedStore()
    fake_upstream.default = model = Upstream(store, open_gate=True)
    proxy = make_proxy(store=store, mode="shadow")
    client = openai_client(proxy, session="beside")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    try:
        shadowed = chat_turn(client, messages, stream=stream)
        # The shadow turn had not read its session yet when the request reached the upstream.
        assert model.reads_seen == [0]
        assert shadowed in ("pending", "none")
        shadow_idle(proxy)
        (turn,) = shadow_turns(proxy.url, only_session(proxy.url))  # recorded once done
        assert turn["shadow"] is True and turn["prompt_tokens"] > 0
        # The next turn of the session reads the state the first one saved.
        chat_turn(client, messages, stream=stream)
        shadow_idle(proxy)
        assert len(shadow_turns(proxy.url, only_session(proxy.url))) == 2
        assert abandoned(proxy) == 0
    finally:
        store.gate.set()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_shadow_turn_past_its_budget_is_abandoned_and_the_request_only_passes(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
) -> None:
    store = GatedStore()
    fake_upstream.default = model = Upstream(store, open_gate=False)
    proxy = make_proxy(store=store, mode="shadow", shadow_budget=0.5)
    client = openai_client(proxy, session="stuck")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    try:
        assert chat_turn(client, messages, stream=stream) == "pending"
        assert model.reads_seen == [0]
        deadline = time.monotonic() + 10 * 0.5 + 5
        while abandoned(proxy) < 1:  # counted once its budget is spent
            assert time.monotonic() < deadline
            time.sleep(0.05)
        store.gate.set()
        shadow_idle(proxy)
        sessions = httpx.get(f"{proxy.url}/admin/sessions").json()["data"]
        assert sessions == []  # nothing recorded for the abandoned turn
        assert abandoned(proxy) == 1
    finally:
        store.gate.set()


def test_the_sdk_reads_a_shadowed_answer_while_the_store_is_stuck(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """The answer is the upstream's, whole, with the store stuck the whole time."""
    store = GatedStore()
    fake_upstream.default = Upstream(store, open_gate=False)
    proxy = make_proxy(store=store, mode="shadow", shadow_budget=30.0)
    client = openai_client(proxy, session="stuck-sdk")
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.status_code == 200 and raw.headers["x-xun-shadow"] == "pending"
        assert isinstance(raw.parse(), openai.types.chat.ChatCompletion)
        assert store.reads == 0
    finally:
        store.gate.set()
