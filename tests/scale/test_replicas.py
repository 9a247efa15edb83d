"""Two proxy processes on one Redis serve one session alternately, exactly like one process.

The same scripted agent runs twice: once against a single `xun-proxy` process, once with its
turns alternating between two processes (turn 1 to A, turn 2 to B, ...) that share a Redis
namespace. The script crosses level-1 compactions, a summary, a mixed round (an extract call
hidden beside the client's own call, re-inserted on every later turn by whichever replica
serves it) and an extract-only round. Every request the upstream receives must be identical
between the two runs, and so must the stored state.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import openai
import pytest

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.session.state import SessionState
from proxy.session.turn_log import TurnLog
from tests.scale.conftest import SHARED_REDIS, ProxyProcess, drop_keys
from tests.scale.script import API_KEY, NumberedModel, read_state, session_key
from tests.support.agent import Agent
from tests.support.fake_upstream import FakeUpstream, Reply

THRESHOLD = 8000
TURNS = 36
SESSION = "replicated"


def mixed_round() -> Reply:
    """The model asks for a compacted result and calls the client's tool in one message."""
    return Reply(
        tool_calls=[
            {"name": EXTRACT_TOOL_NAME, "arguments": {"toolcall_id": "call_0001"}, "id": "call_x1"},
            {"name": "read_file", "arguments": {"path": "b.py"}, "id": "call_r1"},
        ]
    )


def play(fake: FakeUpstream, clients: list[openai.OpenAI]) -> list[str]:
    """Run the script, turn n on clients[n % len(clients)]; the compaction level of each turn."""
    agent = Agent(clients[0], output_size=2000)
    levels: list[str] = []
    mixed_at = extract_at = None
    for turn in range(TURNS):
        agent.client = clients[turn % len(clients)]
        compacted = any(level != "none" for level in levels)
        if compacted and mixed_at is None:
            mixed_at = turn
            fake.push(mixed_round())
        elif "summary" in levels and extract_at is None:
            extract_at = turn  # an extract-only round, answered inside the request
            fake.push(Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": "call_0002"}, id="call_x2"))
        resp = agent.step()
        levels.append(resp.headers["x-xun-compaction"])
    assert mixed_at is not None and extract_at is not None, levels
    return levels


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    """A stored state without its wall-clock stamps, and with the operators' view of the
    client's messages as those messages: how they fall into compressed chunks depends on
    which earlier state each turn's save started from, which a replica's race may change."""
    turns = [
        {k: v for k, v in t.items() if k != "at"} for t in TurnLog(state["turn_log"]).records()
    ]
    view = SessionState(view=state.get("view")).view_messages()
    return {**state, "turn_log": turns, "view": view}


@pytest.fixture
def prefixes() -> Any:
    made: list[str] = []

    def make() -> str:
        made.append(f"xunscale:{uuid.uuid4().hex}:")
        return made[-1]

    yield make
    for prefix in made:
        asyncio.run(drop_keys(f"{SHARED_REDIS}/14", prefix))


def test_two_replicas_behave_as_one(
    fake_upstream: FakeUpstream,
    proxy_processes: Callable[..., ProxyProcess],
    prefixes: Callable[[], str],
) -> None:
    runs: dict[str, tuple[list[str], list[Any], dict[str, Any]]] = {}
    for name, replicas in (("single", 1), ("replicas", 2)):
        fake_upstream.reset()
        fake_upstream.default = NumberedModel()
        url = f"{SHARED_REDIS}/14?prefix={prefixes()}"
        procs = [
            proxy_processes(store=url, upstream=fake_upstream.url, threshold=THRESHOLD)
            for _ in range(replicas)
        ]
        clients = [
            openai.OpenAI(
                base_url=proc.url + "/v1",
                api_key=API_KEY,
                default_headers={"X-Session-Id": SESSION},
                max_retries=0,
            )
            for proc in procs
        ]
        try:
            levels = play(fake_upstream, clients)
        finally:
            for client in clients:
                client.close()
        state, _ = asyncio.run(read_state(url, session_key(SESSION)))
        sent = [r.json for r in fake_upstream.chat_requests]
        runs[name] = (levels, sent, state.to_dict())
        for proc in procs:
            proc.stop()

    levels, sent, state = runs["single"]
    assert "summary" in levels and "toolcall" in levels  # the script crossed both levels
    assert state["summary"] and state["reclaimed"] and state["summary_rounds"] >= 1
    assert any(r["tool_choice"] == "none" for r in sent if "tool_choice" in r)  # a summary call

    r_levels, r_sent, r_state = runs["replicas"]
    assert r_levels == levels
    assert len(r_sent) == len(sent)
    for n, (mine, theirs) in enumerate(zip(r_sent, sent, strict=True)):
        assert mine == theirs, f"upstream request {n} differs"
    assert comparable(r_state) == comparable(state)
    # The hidden call made on one replica was re-inserted by the other on the next turn.
    later = [
        r
        for r in r_sent
        if any(c["id"] == "call_x1" for m in r["messages"] for c in m.get("tool_calls") or [])
    ]
    assert len(later) >= 2
