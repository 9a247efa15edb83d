"""Redis goes away mid-session: every request is still answered, and the proxy recovers alone.

A proxy process runs a compacting session on a private `redis-server`. The server is then
stopped (and, in the second test, frozen with SIGSTOP, which is what a hung or overloaded
server looks like): requests keep getting 200 and go upstream uncompacted, `/readyz` answers
503 naming the store, failures are counted. When Redis is back, `/readyz` turns 200 again by
itself, compaction resumes and the state is written again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from proxy.store import open_store
from tests.scale.conftest import ProxyProcess, RedisServer, wait_until
from tests.scale.script import API_KEY, NumberedModel, session_key
from tests.support.agent import Agent, model_requests
from tests.support.fake_upstream import FakeUpstream

THRESHOLD = 8000
PREFIX = "xunoutage:"


def stored_version(redis: RedisServer, session: str) -> int | None:
    async def read() -> int | None:
        store = open_store(f"{redis.url}?prefix={PREFIX}")
        try:
            return await store.version(session_key(session))
        finally:
            await store.close()

    return asyncio.run(read())


def settled_version(redis: RedisServer, session: str) -> int | None:
    """The stored version once it has stayed the same for a second: a turn's save, and a
    summary the turn started ahead, land after its answer."""
    last, since = stored_version(redis, session), time.monotonic()
    deadline = since + 15
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = stored_version(redis, session)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
    return last


def store_errors(proxy: ProxyProcess) -> float:
    text = httpx.get(proxy.url + "/metrics", timeout=10).text
    lines = [line for line in text.splitlines() if line.startswith("xun_store_errors_total")]
    return float(lines[0].split()[-1]) if lines else 0.0


def compact_once(agent: Agent) -> int:
    """Run turns until the proxy compacts; how many turns that took."""
    for turn in range(1, 60):
        resp = agent.step()
        if resp.headers["x-xun-compaction"] != "none":
            return turn
    raise AssertionError("the session never compacted")


@pytest.fixture
def setup(
    fake_upstream: FakeUpstream,
    redis_server: RedisServer,
    proxy_processes: Callable[..., ProxyProcess],
) -> Any:
    fake_upstream.default = NumberedModel()
    proxy = proxy_processes(
        store=f"{redis_server.url}?prefix={PREFIX}", upstream=fake_upstream.url, threshold=THRESHOLD
    )
    client = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key=API_KEY,
        default_headers={"X-Session-Id": "outage"},
        max_retries=0,
        timeout=30,
    )
    yield proxy, Agent(client, output_size=2000)
    client.close()


def assert_passed_through(fake: FakeUpstream, agent: Agent, resp: Any) -> None:
    """The last request went upstream exactly as the client sent it."""
    assert resp.http_response.status_code == 200
    assert resp.headers["x-xun-compaction"] == "none"
    sent = model_requests(fake.chat_requests)[-1].json
    assert sent["messages"] == agent.messages[: len(sent["messages"])]
    assert len(sent["messages"]) == len(agent.messages) - 2  # before this turn's reply
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file"]


def test_redis_stopped_and_restarted(
    setup: Any, fake_upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    proxy, agent = setup
    compact_once(agent)
    written = stored_version(redis_server, "outage")
    assert written is not None
    assert proxy.readyz().status_code == 200
    errors_before = store_errors(proxy)

    redis_server.stop()
    not_ready = proxy.readyz()
    assert not_ready.status_code == 503
    assert not_ready.json()["store_url"] == redis_server.url
    assert redis_server.url in not_ready.json()["error"]["message"]
    durations = []
    for _ in range(4):  # the session goes on, uncompacted, while the store is away
        started = time.monotonic()
        resp = agent.step()
        durations.append(time.monotonic() - started)
        assert_passed_through(fake_upstream, agent, resp)
    assert max(durations) < 5
    assert store_errors(proxy) >= errors_before + 4
    log = proxy.log_path.read_text()
    assert "session store read (passing through uncompacted) failed" in log

    redis_server.start()  # same port, empty: it kept nothing
    started = time.monotonic()
    wait_until(lambda: proxy.readyz().status_code == 200, 10, "/readyz to recover")
    recovered = time.monotonic() - started
    ready = proxy.readyz(verbose="1").json()
    assert ready["store"] == "ok" and ready["store_url"] == redis_server.url
    # The state went with the old server; the session starts afresh and compacts again.
    assert stored_version(redis_server, "outage") is None
    levels = [agent.step().headers["x-xun-compaction"] for _ in range(3)]
    assert levels[0] != "none", levels
    assert stored_version(redis_server, "outage") is not None
    print(f"\noutage: requests took {max(durations):.3f}s at most; ready again {recovered:.2f}s")


def test_redis_frozen_and_thawed(
    setup: Any, fake_upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    proxy, agent = setup
    compact_once(agent)
    version = settled_version(redis_server, "outage")
    assert version is not None

    redis_server.pause()  # accepts connections, answers nothing
    try:
        started = time.monotonic()
        assert proxy.readyz().status_code == 503
        durations = []
        for _ in range(2):
            started = time.monotonic()
            resp = agent.step()
            durations.append(time.monotonic() - started)
            assert_passed_through(fake_upstream, agent, resp)
        # Bounded by the store's timeouts (1s, one retry: about 2-3 s), not by the hang.
        assert max(durations) < 15, durations
    finally:
        redis_server.resume()
    wait_until(lambda: proxy.readyz().status_code == 200, 10, "/readyz to recover")
    # The state survived the freeze: the session resumes where it was, and writes again. (A
    # save that waited on the frozen store may land once it thaws: never an older version.)
    thawed = stored_version(redis_server, "outage")
    assert thawed is not None and thawed >= version
    resp = agent.step()
    assert resp.http_response.status_code == 200
    after = stored_version(redis_server, "outage")
    assert after is not None and after > thawed
    print(f"\nfrozen store: requests took {max(durations):.2f}s at most")
