"""A client that goes away: the upstream request is closed within a second, and a session
whose summary call was in flight when the client left stays consistent."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.session.history import validate
from proxy.session.state import SessionState
from tests.conftest import MakeProxy
from tests.reliability.conftest import wait_until
from tests.support.agent import Agent, ModelScript, is_summary_request
from tests.support.fake_upstream import FakeUpstream, Reply

PATHS = {
    "pass-through": {"authorization": "Bearer sk-gone"},
    "compacting": {"authorization": "Bearer sk-gone", "x-session-id": "gone-1"},
}
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "stream": True}


def stored_states(db: Path, proxy: Any = None) -> list[SessionState]:
    """Every session state in an SQLite store file, parsed (raises if any is corrupt); with
    `proxy`, once its saves have landed."""
    if proxy is not None:
        proxy.settle()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT data FROM sessions").fetchall()
    return [SessionState.from_bytes(bytes(row[0])) for row in rows]


def assert_upstream_closed_within_a_second(fake_upstream: FakeUpstream) -> None:
    """The one upstream request was closed by the proxy, unfinished, within a second."""
    left = time.monotonic()
    assert fake_upstream.wait_for_disconnect(timeout=1.0)
    assert time.monotonic() - left < 1.0
    (request,) = fake_upstream.chat_requests
    assert request.disconnected and not request.completed


@pytest.mark.parametrize("path", list(PATHS))
def test_disconnect_mid_stream_closes_the_upstream_request_within_a_second(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, path: str
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.text("y" * 2000, chunk_chars=4, chunk_delay=0.02))
    with httpx.Client(timeout=10) as client:
        url = proxy.base_url + "/chat/completions"
        with client.stream("POST", url, json=BODY, headers=PATHS[path]) as response:
            # Kept: an iterator dropped half-way is closed when the collector frees it, and
            # closing it closes the connection, so when the proxy would see the client
            # leave would depend on when the test process happens to collect.
            chunks = response.iter_raw()
            first = next(chunks)
            assert first.startswith(b"data: ")
            # The fake counts the stream from its own thread: give the count a moment.
            assert fake_upstream.wait_for(lambda: fake_upstream.open_streams == 1, timeout=2)
    assert_upstream_closed_within_a_second(fake_upstream)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_client_that_leaves_before_a_completion_is_ready_stops_the_upstream_call(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, path: str
) -> None:
    """Not streamed: the answer comes whole, after the upstream has generated it all."""
    proxy = make_proxy()
    fake_upstream.push(Reply.text("a long answer", delay=5))
    body = {**BODY, "stream": False}
    with httpx.Client(timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
        client.post(proxy.base_url + "/chat/completions", json=body, headers=PATHS[path])
    assert_upstream_closed_within_a_second(fake_upstream)
    # The proxy is fine, and answers the next request (on a fresh upstream connection).
    fake_upstream.push(Reply.text("again"))
    with httpx.Client(timeout=10) as client:
        again = client.post(proxy.base_url + "/chat/completions", json=body, headers=PATHS[path])
    assert again.status_code == 200
    assert again.json()["choices"][0]["message"]["content"] == "again"


def test_disconnect_during_a_summary_call_leaves_the_session_consistent(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: Any,
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    proxy = make_proxy(token_threshold=8000, store_url=f"sqlite:///{db}")
    script = ModelScript()

    def slow_summaries(body: dict[str, Any]) -> Reply:
        answer = script(body)
        if is_summary_request(body):
            answer.delay = 1.5  # the client gives up while the proxy waits for this
        elif script.summaries:
            answer.delay = 0.5  # a model takes its time: the proxy stops waiting first
        return answer

    fake_upstream.default = slow_summaries
    impatient = openai_client(proxy, session="gone-2", api_key="sk-gone", timeout=0.8)
    agent = Agent(impatient, output_size=2000)
    gave_up = False
    for _ in range(40):
        try:
            agent.step()
        except openai.APITimeoutError:
            gave_up = True
            break
    assert gave_up, "no summary call happened"
    assert script.summaries >= 1
    # The proxy finishes the compaction on its own and saves it; the model round after it
    # is stopped, or never sent, since nobody is left to read its answer.
    assert wait_until(lambda: any(state.summary for state in stored_states(db)), timeout=10)
    time.sleep(0.5)  # whatever the proxy still does for this turn, it is done by now
    (state,) = stored_states(db)
    assert state.summary and state.cut > 0 and state.cut_hash and state.summary_rounds >= 1
    summary_at = max(
        r.received_at for r in fake_upstream.chat_requests if is_summary_request(r.json)
    )
    rounds = [
        r
        for r in fake_upstream.chat_requests
        if r.received_at > summary_at and not is_summary_request(r.json)
    ]
    assert all(r.disconnected and not r.completed for r in rounds), rounds

    # The client retries the same turn with a patient client: the session carries on.
    agent.client = openai_client(proxy, session="gone-2", api_key="sk-gone")
    before = len(fake_upstream.chat_requests)
    agent.step()
    sent = [r.json for r in fake_upstream.chat_requests[before:] if not is_summary_request(r.json)]
    assert sent
    proxy.settle()
    upstream_messages = sent[0]["messages"]
    validate(upstream_messages)  # a well-formed sequence: every tool result follows its call
    assert "<conversation_summary>" in upstream_messages[0]["content"]
    (after,) = stored_states(db)
    assert after.summary and after.summary_rounds >= state.summary_rounds
