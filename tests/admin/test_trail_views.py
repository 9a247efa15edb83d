"""The artifact trail for people: the admin detail shows it, the metrics count its entries."""

from __future__ import annotations

import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from proxy import trail
from proxy.server.metrics import Metrics
from proxy.session.state import SessionState
from proxy.store import SessionKey
from proxy.store.memory import MemoryStore
from tests.support.compacted import ADMIN_KEY, admin_headers


def dropped() -> list[dict[str, Any]]:
    args = json.dumps({"file_path": "src/app/main.py"})
    return [
        {"role": "user", "content": "Never push to main."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "print('hi')"},
    ]


async def test_admin_detail_shows_the_trail(make_proxy: Any) -> None:
    store = MemoryStore()
    kept = trail.update(None, dropped(), budget=200)
    key = SessionKey("tenant", "with-trail")
    state = SessionState(summary="## overview\nwork", trail=kept, total_tokens=5)
    await store.put(key, state.to_bytes(), {}, expected_version=None)
    old_key = SessionKey("tenant", "old")
    await store.put(old_key, SessionState(total_tokens=1).to_bytes(), {}, expected_version=None)
    proxy = make_proxy(admin_key=ADMIN_KEY, store=store)
    async with httpx.AsyncClient(headers=admin_headers()) as client:
        detail = (await client.get(f"{proxy.url}/admin/sessions/{key.id}")).json()
        old = await client.get(f"{proxy.url}/admin/sessions/{SessionKey('tenant', 'old').id}")
    shown = detail["trail"]
    assert shown["counts"] == {"file": 1, "command": 0, "error": 0, "constraint": 1}
    assert shown["budget"] == 200
    assert shown["rendered"] == trail.render(kept)
    assert "- src/app/main.py\n" in shown["rendered"]
    assert [e["kind"] for e in shown["entries"]] == ["file", "constraint"]  # newest first
    assert "trail" not in detail["state"]  # shown once, not twice
    assert old.status_code == 200 and old.json()["trail"] is None


def test_metrics_count_the_entries_of_a_new_trail() -> None:
    metrics = Metrics()
    for entries in ({"file": 3, "command": 2}, {"file": 5, "Bad Kind!": 1}):
        metrics.observe_request(
            route="/v1/chat/completions",
            method="POST",
            status=200,
            seconds=0.1,
            fields={"compaction": "summary", "trail_entries": entries},
        )
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    assert samples[("xun_trail_entries_count", (("kind", "file"),))] == 2
    assert samples[("xun_trail_entries_sum", (("kind", "file"),))] == 8
    assert samples[("xun_trail_entries_sum", (("kind", "command"),))] == 2
    assert samples[("xun_trail_entries_sum", (("kind", "other"),))] == 1
