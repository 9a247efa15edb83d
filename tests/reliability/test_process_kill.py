"""`kill -9` of the proxy process, between turns and mid-turn, with an SQLite store.

After a restart on the same file the session continues: nothing decided before the
interrupted turn is lost, the file passes SQLite's integrity check, and every stored state
parses. A kill never leaves a half-written state (each write is one SQLite statement).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.session.state import SessionState
from tests.reliability.conftest import ProxyProcess, SpawnProxy
from tests.support.agent import Agent, ModelScript, is_summary_request, summary_count
from tests.support.fake_upstream import FakeUpstream, Reply

SESSION = "kill-1"
KEY = "sk-kill"


def stored(db: Path) -> tuple[int, SessionState]:
    """The one session's (version, state), after checking the whole file's integrity."""
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT version, data FROM sessions").fetchall()
    [(version, data)] = rows
    return int(version), SessionState.from_bytes(bytes(data))


def client_for(proxy: ProxyProcess, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.base_url,
        api_key=KEY,
        default_headers={"X-Session-Id": SESSION},
        max_retries=0,
        **kwargs,
    )


@pytest.fixture
def summarised(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, tmp_path: Path
) -> tuple[Agent, ProxyProcess, Path, ModelScript]:
    """A session on a proxy subprocess that has already summarised once."""
    db = tmp_path / "sessions.db"
    script = ModelScript()
    fake_upstream.default = script
    proxy = spawn_proxy(
        upstream=fake_upstream.url, store=f"sqlite:///{db}", token_threshold=8000, drain_timeout=1
    )
    agent = Agent(client_for(proxy), output_size=2000)
    for _ in range(40):
        agent.step()
        if summary_count(fake_upstream.requests):
            break
    agent.step()
    assert summary_count(fake_upstream.requests) == 1
    proxy.settle()
    return agent, proxy, db, script


def restart(spawn_proxy: SpawnProxy, old: ProxyProcess, db: Path) -> ProxyProcess:
    upstream = old.env["XUN_UPSTREAM"]
    return spawn_proxy(
        upstream=upstream, store=f"sqlite:///{db}", token_threshold=8000, drain_timeout=1
    )


def last_model_request(fake: FakeUpstream) -> dict[str, Any]:
    body: dict[str, Any] = [r for r in fake.chat_requests if not is_summary_request(r.json)][
        -1
    ].json
    return body


def test_kill_between_turns_keeps_the_compaction(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, summarised: Any
) -> None:
    agent, proxy, db, _ = summarised
    agent.client.close()
    version, before = stored(db)
    assert before.summary
    proxy.kill9()
    assert stored(db) == (version, before)  # the WAL held every committed write

    proxy = restart(spawn_proxy, proxy, db)
    agent.client = client_for(proxy)
    agent.step()
    system = last_model_request(fake_upstream)["messages"][0]["content"]
    assert before.summary in system  # the summary from before the kill is still applied
    proxy.settle()
    after_version, after = stored(db)
    assert after_version > version
    assert after.summary_rounds >= before.summary_rounds
    assert after.prefix_len == len(agent.messages) - 2  # last assistant reply + its tool result
    assert summary_count(fake_upstream.requests) == 1  # nothing had to be redone
    agent.client.close()


def test_kill_mid_stream_loses_only_that_turn(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, summarised: Any
) -> None:
    agent, proxy, db, script = summarised
    agent.client.close()
    version, before = stored(db)
    hold = threading.Event()
    fake_upstream.default = None
    fake_upstream.push(Reply.tool("read_file", {"path": "held.py"}, hold=hold))
    try:
        body = {"model": "gpt-4o", "messages": agent.messages, "stream": True}
        headers = {"authorization": f"Bearer {KEY}", "x-session-id": SESSION}
        with httpx.Client(timeout=30) as client:
            url = proxy.base_url + "/chat/completions"
            with client.stream("POST", url, json=body, headers=headers) as response:
                chunks = response.iter_raw()
                next(chunks)
                proxy.kill9()
                with pytest.raises(httpx.HTTPError):
                    b"".join(chunks)
    finally:
        hold.set()
    assert stored(db) == (version, before)  # the interrupted turn never saved

    fake_upstream.default = script
    proxy = restart(spawn_proxy, proxy, db)
    agent.client = client_for(proxy)
    agent.step()  # the client retries the turn
    assert before.summary in last_model_request(fake_upstream)["messages"][0]["content"]
    proxy.settle()
    assert stored(db)[0] > version
    agent.client.close()


def kill_during_summary(
    fake: FakeUpstream, agent: Agent, proxy: ProxyProcess, db: Path, script: ModelScript
) -> tuple[int, SessionState]:
    """Drive the agent until the proxy waits on a summary call, kill it then; the stored
    (version, state) from just before the kill."""
    agent.client.close()
    summary_started = threading.Event()

    def stall_summaries(body: dict[str, Any]) -> Reply:
        answer = script(body)
        if is_summary_request(body):
            summary_started.set()
            answer.delay = 30  # killed long before this ends
        return answer

    fake.default = stall_summaries
    agent.client = client_for(proxy, timeout=60)
    failed = threading.Event()

    def drive() -> None:
        try:
            for _ in range(40):
                agent.step()
        except openai.APIConnectionError:
            failed.set()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    assert summary_started.wait(timeout=60), "the session never summarised again"
    before = stored(db)
    proxy.kill9()
    driver.join(timeout=30)
    assert failed.is_set()
    agent.client.close()
    fake.default = script
    return before


def test_kill_during_a_summary_call_keeps_the_previous_state(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, summarised: Any
) -> None:
    agent, proxy, db, script = summarised
    version, before = kill_during_summary(fake_upstream, agent, proxy, db, script)
    assert stored(db) == (version, before)  # no half-applied summary
    assert before.summary

    proxy = restart(spawn_proxy, proxy, db)
    agent.client = client_for(proxy)
    # The retried turn is served, from the state the killed process left; the compaction
    # lease it held runs down unrenewed, so the turn takes it over and summarises again.
    agent.step()
    assert "<conversation_summary>" in last_model_request(fake_upstream)["messages"][0]["content"]
    for _ in range(5):  # the session has summarised again (at the latest when it next needs to)
        if stored(db)[1].summary_rounds > before.summary_rounds:
            break
        agent.step()
    _, after = stored(db)
    assert after.summary and after.summary != before.summary
    assert after.summary_rounds == before.summary_rounds + 1
    agent.client.close()


def test_turn_after_a_kill_during_compaction_does_not_wait_for_the_dead_lease(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, summarised: Any
) -> None:
    agent, proxy, db, script = summarised
    _, before = kill_during_summary(fake_upstream, agent, proxy, db, script)
    proxy = restart(spawn_proxy, proxy, db)
    agent.client = client_for(proxy, timeout=5)
    try:
        agent.step()  # the dead holder's lease runs down within seconds, then is taken over
        assert stored(db)[1].summary_rounds == before.summary_rounds + 1
    finally:
        agent.client.close()
