"""POST /admin/sessions/{id}/compact: manual level 1 and level 2, saved with compare-and-set,
and applied to the session's next request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.compact import SUMMARY_PROMPT, placeholder_for
from proxy.store.memory import MemoryStore
from tests.support.agent import is_summary_request, model_requests
from tests.support.compacted import CLIENT_KEY, Compacted, admin_headers, compacted_session
from tests.support.fake_upstream import FakeUpstream, Reply

UPSTREAM_KEY = "sk-upstream-admin-0000"


@pytest.fixture
def compacted(fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any) -> Compacted:
    return compacted_session(fake_upstream, make_proxy, openai_client)


def placeholders(detail: dict[str, Any]) -> list[str]:
    return [m["compacted_id"] for m in detail["conversation"] if m.get("compacted_id")]


def test_toolcall_reclaims_and_the_next_turn_sees_it(
    fake_upstream: FakeUpstream, compacted: Compacted
) -> None:
    before = compacted.detail()
    resp = compacted.post("/compact", json={"mode": "toolcall", "keep": 2})
    assert resp.status_code == 200, resp.text
    result = resp.json()
    tools = [m for m in before["conversation"] if m["role"] == "tool"]
    assert result["reclaimed_count"] == len(tools) - 6 - 2  # six were reclaimed already
    assert 0 < result["reclaimed_fraction"] < 1
    assert result["mode"] == "toolcall" and result["changed"] is True
    assert result["version"] == before["version"] + 1
    assert result["total_tokens"] < before["total_tokens"]

    after = compacted.detail()
    assert len(placeholders(after)) == len(tools) - 2
    assert after["turns"][-1] | {"at": 0} == {
        "at": 0,
        "messages": before["meta"]["messages"],
        "total_tokens": result["total_tokens"],
        "prompt_tokens": None,
        "cached_tokens": None,
        "compaction": "toolcall",
        "manual": True,
    }
    assert after["last_compaction"]["manual"] is True
    assert after["summary"] == before["summary"]  # level 1 leaves the summary alone

    # The saved state applies to the client's next request.
    compacted.agent.step()
    sent = model_requests(fake_upstream.chat_requests)[-1].json["messages"]
    sent_tools = [m["content"] for m in sent if m["role"] == "tool"]
    for call_id in placeholders(after):
        assert placeholder_for(call_id) in sent_tools
    assert compacted.agent.responses[-1].headers["x-xun-compaction"] == "none"


def test_toolcall_with_nothing_to_reclaim_saves_nothing(compacted: Compacted) -> None:
    compacted.post("/compact", json={"mode": "toolcall", "keep": 0})
    version = compacted.detail()["version"]
    result = compacted.post("/compact", json={"mode": "toolcall", "keep": 0}).json()
    assert result["reclaimed_count"] == 0 and result["changed"] is False
    assert result["version"] == version == compacted.detail()["version"]


def test_toolcall_default_keep_is_the_setting(compacted: Compacted) -> None:
    result = compacted.post("/compact", json={"mode": "toolcall"}).json()
    assert result["reclaimed_count"] == 0  # auto-compaction already kept only the newest 6


def test_without_an_upstream_key_the_summary_waits_for_the_next_turn(
    fake_upstream: FakeUpstream, compacted: Compacted
) -> None:
    before = compacted.detail()
    calls = len(fake_upstream.chat_requests)
    resp = compacted.post("/compact", json={"mode": "summary", "model": "gpt-4o", "keep": 4})
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "pending" and resp.json()["changed"] is False
    assert len(fake_upstream.chat_requests) == calls  # nobody was called with no key
    assert compacted.detail()["pending_summary"] is True

    compacted.agent.step()  # the client's next request makes it, with its own credentials
    summaries = [r for r in fake_upstream.chat_requests[calls:] if is_summary_request(r.json)]
    assert len(summaries) == 1
    assert summaries[0].headers["authorization"] == f"Bearer {CLIENT_KEY}"
    after = compacted.detail()
    assert after["pending_summary"] is False
    assert after["counters"]["summary_rounds"] == before["counters"]["summary_rounds"] + 1
    assert compacted.agent.responses[-1].headers["x-xun-compaction"] == "summary"
    sent = model_requests(fake_upstream.chat_requests)[-1].json["messages"]
    assert after["summary"] and after["summary"][:40] in sent[0]["content"]


def test_summary_needs_a_model(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    c = compacted_session(fake_upstream, make_proxy, openai_client, upstream_api_key=UPSTREAM_KEY)
    resp = c.post("/compact", json={"mode": "summary"})
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "model"
    assert "--summary-model" in resp.json()["error"]["message"]


@pytest.mark.parametrize("model_from", ["body", "settings"])
def test_summary_calls_upstream_with_the_upstream_key(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, model_from: str
) -> None:
    extra = {"summary_model": "gpt-4o-mini"} if model_from == "settings" else {}
    c = compacted_session(
        fake_upstream, make_proxy, openai_client, upstream_api_key=UPSTREAM_KEY, **extra
    )
    before = c.detail()
    body = {"mode": "summary", "keep": 4}
    if model_from == "body":
        body["model"] = "gpt-4o-mini"
    resp = c.post("/compact", json=body)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["status"] == "success" and result["changed"] is True
    assert result["summary"].startswith("## overview\nSummary number 2 of the work")
    assert result["summarized_count"] > 0 and result["kept_count"] >= 4

    request = fake_upstream.chat_requests[-1]
    assert request.json["messages"][0]["content"] == SUMMARY_PROMPT
    assert request.json["model"] == "gpt-4o-mini" and request.json["stream"] is False
    assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    # The earlier summary goes in, so nothing it held is lost.
    assert any("Summary number 1" in str(m.get("content")) for m in request.json["messages"])

    after = c.detail()
    assert after["summary"] == result["summary"]
    assert after["counters"]["summary_rounds"] == before["counters"]["summary_rounds"] + 1
    assert len(after["conversation"]) < len(before["conversation"])
    assert after["turns"][-1]["compaction"] == "summary" and after["turns"][-1]["manual"]

    c.agent.step()
    sent = model_requests(fake_upstream.chat_requests)[-1].json["messages"]
    assert "Summary number 2 of the work" in sent[0]["content"]


def test_failed_summary_changes_nothing(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    c = compacted_session(fake_upstream, make_proxy, openai_client, upstream_api_key=UPSTREAM_KEY)
    before = c.detail()
    fake_upstream.push(Reply.error(500, "The server had an error", "server_error"))
    result = c.post("/compact", json={"mode": "summary", "model": "gpt-4o", "keep": 4}).json()
    assert result["status"] == "summarize_failed" and result["changed"] is False
    assert "500" in result["upstream_error"]
    after = c.detail()
    assert after["version"] == before["version"] and after["summary"] == before["summary"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"mode": "everything"}, "mode"),
        ({}, "mode"),
        ({"mode": "toolcall", "keep": -1}, "keep"),
        ({"mode": "toolcall", "colour": "blue"}, "colour"),
        ({"mode": "summary", "model": ""}, "model"),
        ([], None),
    ],
)
def test_compact_body_is_validated(compacted: Compacted, body: Any, param: str | None) -> None:
    resp = compacted.post("/compact", json=body)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == param


def test_compact_body_must_be_json(compacted: Compacted) -> None:
    url = f"{compacted.proxy.url}/admin/sessions/{compacted.id}/compact"
    json_type = {**admin_headers(), "content-type": "application/json"}
    resp = httpx.post(url, content=b"mode=toolcall", headers=json_type)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    # Without the JSON media type (a form a web page could post cross-site): 415.
    resp = compacted.post("/compact", content=b"mode=toolcall")
    assert resp.status_code == 415 and resp.json()["error"]["code"] == "unsupported_media_type"


class RacingStore(MemoryStore):
    """A store where a client turn lands between the admin's read and its write."""

    race = False

    async def get_by_id(self, session_id: str) -> Any:
        found = await super().get_by_id(session_id)
        if self.race and found is not None:
            self.race = False
            await self.put(found.key, found.data, found.meta, expected_version=found.version)
        return found


def test_concurrent_update_is_a_409(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    store = RacingStore()
    c = compacted_session(fake_upstream, make_proxy, openai_client, store=store)
    version = c.detail()["version"]
    store.race = True
    resp = c.post("/compact", json={"mode": "toolcall", "keep": 1})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "version_conflict"
    after = c.detail()
    assert after["version"] == version + 1  # the racing write, not ours
    assert "manual" not in after["turns"][-1]


def test_manual_compactions_are_counted(compacted: Compacted) -> None:
    compacted.post("/compact", json={"mode": "toolcall", "keep": 1})
    compacted.post("/compact", json={"mode": "toolcall", "keep": 1})
    text = httpx.get(compacted.proxy.url + "/metrics").text
    manual = 'trigger="manual",wire="chat"} 1.0'
    assert 'xun_compactions_total{level="toolcall",outcome="success",' + manual in text
    assert 'xun_compactions_total{level="toolcall",outcome="nothing_to_condense",' + manual in text


def test_summary_with_nothing_to_condense_calls_nobody(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    c = compacted_session(fake_upstream, make_proxy, openai_client, upstream_api_key=UPSTREAM_KEY)
    calls = len(fake_upstream.chat_requests)
    result = c.post("/compact", json={"mode": "summary", "model": "gpt-4o", "keep": 500}).json()
    assert result["status"] == "nothing_to_condense" and result["changed"] is False
    assert len(fake_upstream.chat_requests) == calls
