"""/metrics: counters move with a compacting session; one registry per app; safe labels."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.server.app import create_app
from proxy.server.metrics import ACTIVE_SESSIONS_TTL, Metrics, route_label
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.settings import Settings
from proxy.store import StoreError
from proxy.store.memory import MemoryStore
from tests.support.compacted import CLIENT_KEY, compacted_session
from tests.support.fake_upstream import FakeUpstream, Reply

CHAT = "/v1/chat/completions"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(proxy: Any) -> Samples:
    resp = httpx.get(proxy.url + "/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(resp.text)


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_counters_move_with_a_compacting_session(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    c = compacted_session(fake_upstream, make_proxy, openai_client)
    steps = len(c.levels)
    # One extract round answered by the proxy, inside the next client request.
    reclaimed = c.detail()["reclaimed"][0]
    fake_upstream.push(Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": reclaimed}), Reply.text("ok"))
    c.agent.step()
    m = scrape(c.proxy)

    chat_ok = {"route": CHAT, "method": "POST", "status": "200", "wire": "chat"}
    assert value(m, "xun_requests_total", **chat_ok) == steps + 1
    auto = {"outcome": "success", "trigger": "auto", "wire": "chat"}
    assert value(m, "xun_compactions_total", level="toolcall", **auto) == 2
    assert value(m, "xun_compactions_total", level="summary", **auto) == 1
    assert value(m, "xun_compaction_tokens_before_count") == 3
    assert value(m, "xun_worker_processes") == 1  # one process (tests/scale/test_workers.py: 2)
    assert value(m, "xun_compaction_tokens_after_count") == 3
    assert value(m, "xun_compaction_tokens_before_sum") > value(
        m, "xun_compaction_tokens_after_sum"
    )
    assert value(m, "xun_summary_calls_total") == 1
    assert value(m, "xun_extract_calls_total") == 1
    assert value(m, "xun_store_errors_total") == 0
    assert value(m, "xun_active_sessions") == 1
    assert value(m, "xun_upstream_seconds_count", route=CHAT) == steps + 1
    assert value(m, "xun_upstream_seconds_sum", route=CHAT) > 0
    assert value(m, "xun_proxy_overhead_seconds_count", route=CHAT) == steps + 1
    assert value(m, "xun_proxy_overhead_seconds_bucket", route=CHAT, le="+Inf") == steps + 1

    # Admin and 404 requests are counted under their route template, never their path.
    c.get()
    httpx.get(c.proxy.url + "/nowhere/" + c.id)
    text = httpx.get(c.proxy.url + "/metrics").text
    m = parse(text)
    admin = {"route": "/admin/sessions/{id}", "method": "GET", "status": "200", "wire": "none"}
    assert value(m, "xun_requests_total", **admin)
    missing = {"route": "unmatched", "method": "GET", "status": "404", "wire": "none"}
    assert value(m, "xun_requests_total", **missing) == 1
    for secret in (c.id, "agent-1", CLIENT_KEY, c.detail()["tenant"], reclaimed):
        assert secret not in text


def test_streamed_requests_are_counted(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy()
    client = openai_client(proxy, session="s")
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    m = scrape(proxy)
    assert value(m, "xun_requests_total", route=CHAT, method="POST", status="200", wire="chat") == 1
    assert value(m, "xun_upstream_seconds_count", route=CHAT) == 1


class DownStore(MemoryStore):
    async def get(self, key: Any) -> Any:
        raise StoreError("down")

    async def count(self) -> int:
        raise StoreError("down")


def test_store_errors_and_degraded_requests(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy(store=DownStore())
    client = openai_client(proxy, session="s")
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    m = scrape(proxy)
    assert value(m, "xun_store_errors_total") == 2  # the request's read, and the scrape's count
    assert value(m, "xun_degraded_requests_total", reason="store_unavailable") == 1


def test_each_app_has_its_own_registry(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    first, second = make_proxy(), make_proxy()
    for _ in range(3):
        httpx.get(first.url + "/healthz")
    ok = {"route": "/healthz", "method": "GET", "status": "200", "wire": "none"}
    assert value(scrape(first), "xun_requests_total", **ok) == 3
    assert value(scrape(second), "xun_requests_total", **ok) == 0
    a = create_app(Settings(store_url="memory://"))
    b = create_app(Settings(store_url="memory://"))
    assert a.state.metrics.registry is not b.state.metrics.registry


def test_labels_stay_in_small_vocabularies() -> None:
    metrics = Metrics()
    for i in range(50):
        metrics.observe_request(
            route="/v1/{path:path}",
            method=f"BREW{i}",
            status=200,
            seconds=0.1,
            fields={"degraded": f"Reason with session s-{i}!", "upstream_ms": 40},
        )
    m = parse(metrics.render().decode())
    ok = {"route": "/v1/{path:path}", "method": "OTHER", "status": "200", "wire": "none"}
    assert value(m, "xun_requests_total", **ok) == 50
    assert value(m, "xun_degraded_requests_total", reason="other") == 50
    assert value(m, "xun_proxy_overhead_seconds_sum", route="/v1/{path:path}") == pytest.approx(
        50 * 0.06
    )


@pytest.mark.parametrize("session", [None, "s-stream"])
def test_a_slow_stream_counts_as_upstream_time_not_proxy_time(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, session: str | None
) -> None:
    proxy = make_proxy()
    # 10 chunks 0.2 s apart: the stream takes at least 1.8 s, all of it the upstream's.
    fake_upstream.push(Reply.text("x" * 120, chunk_chars=12, chunk_delay=0.2))
    client = openai_client(proxy, session=session)
    list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    m = parse(httpx.get(proxy.url + "/metrics").text)
    upstream = value(m, "xun_upstream_seconds_sum", route=CHAT)
    overhead = value(m, "xun_proxy_overhead_seconds_sum", route=CHAT)
    assert upstream >= 1.8  # a lower bound: the waits cannot take less
    # Counted as the proxy's, the waits would make its time 1.8 s or more: 5x that margin.
    assert overhead < 1.8 / 5, (overhead, upstream)


def test_route_label_without_a_match() -> None:
    assert route_label({"type": "http", "path": "/x"}) == "unmatched"


class CountingStore(MemoryStore):
    counts = 0

    async def count(self) -> int:
        self.counts += 1
        return 7


async def test_active_sessions_are_sampled_cheaply() -> None:
    metrics = Metrics()
    store = CountingStore()
    await metrics.sample_store(store, now=100.0)
    await metrics.sample_store(store, now=100.0 + ACTIVE_SESSIONS_TTL / 2)
    assert store.counts == 1
    await metrics.sample_store(store, now=100.0 + ACTIVE_SESSIONS_TTL + 1)
    assert store.counts == 2
    assert value(parse(metrics.render().decode()), "xun_active_sessions") == 7
