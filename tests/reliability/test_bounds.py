"""Resource bounds: the per-session stored size cap and the concurrent upstream connections.

Proven elsewhere: the request body cap on every route (tests/server/test_forward.py::
test_oversized_body_is_413, tests/wire/chat/test_chat_inputs.py::test_oversized_body_gets_413),
bounded extract rounds (tests/wire/chat/test_chat_stream.py::test_extract_rounds_are_bounded), a
full pool answering 503 + Retry-After
(tests/server/test_forward.py::test_connection_pool_is_bounded); the load test is
tests/reliability/test_load.py.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import MakeProxy
from tests.support.agent import Agent, ModelScript
from tests.support.fake_upstream import FakeUpstream, Reply


def test_stored_state_never_exceeds_the_session_cap(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: Any, tmp_path: Path
) -> None:
    db = tmp_path / "cap.db"
    cap = 6000
    proxy = make_proxy(token_threshold=8000, session_max_bytes=cap, store_url=f"sqlite:///{db}")
    fake_upstream.default = ModelScript()
    agent = Agent(openai_client(proxy, "capped", api_key="sk-cap"), output_size=3000)
    for _ in range(25):
        agent.step()  # every turn answered, whatever the store refuses
    with sqlite3.connect(db) as conn:
        sizes = [int(n) for (n,) in conn.execute("SELECT length(data) FROM sessions")]
    assert sizes and max(sizes) <= cap


def test_concurrent_upstream_connections_are_bounded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    limit, clients = 3, 8
    proxy = make_proxy(max_upstream_connections=limit, pool_timeout=30)
    fake_upstream.default = lambda body: Reply.text("x" * 60, chunk_chars=4, chunk_delay=0.02)
    most = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, fake_upstream.open_streams)
            time.sleep(0.005)

    def one(n: int) -> bytes:
        body = {"model": "m", "messages": [{"role": "user", "content": str(n)}], "stream": True}
        headers = {"x-session-id": f"pool-{n}"} if n % 2 else {}
        response = httpx.post(
            proxy.base_url + "/chat/completions", json=body, headers=headers, timeout=60
        )
        assert response.status_code == 200
        return response.content

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(one, range(clients)))
    finally:
        done.set()
        watcher.join(timeout=5)
    assert all(r.endswith(b"data: [DONE]\n\n") for r in results)
    assert len(fake_upstream.chat_requests) == clients
    assert most == limit  # the pool was full, and never over
