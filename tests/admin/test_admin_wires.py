"""Responses and Messages sessions in the admin API, the sessions CLI, metrics and logs.

The sessions are made through the real proxy (uvicorn) by stateless agents against the
scripted fakes (tests/support/wire_sessions.py): reasoning items with `encrypted_content`, thinking
blocks with signatures, mid-conversation system items, placeholders.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import cli
from proxy.conversation import Conversation
from proxy.server.logging import ACCESS_LOGGER, JsonFormatter
from proxy.session.state import SessionState
from tests.support.claude_model import LAST_READ
from tests.support.fake_responses import ReadFiles, input_items
from tests.support.wire_sessions import (
    INSTRUCTIONS,
    REMINDER,
    Run,
    WireProxy,
    run_messages,
    run_responses,
    wire_proxy,
)


def opaque(run: Run) -> list[str]:
    """The encrypted reasoning and thinking signatures of a run's history."""
    found = []
    for entry in run.history:
        if entry.get("type") == "reasoning":
            found.append(entry["encrypted_content"])
        if entry.get("role") == "assistant" and isinstance(entry.get("content"), list):
            found += [b["signature"] for b in entry["content"] if b.get("type") == "thinking"]
    return found


@pytest.fixture(scope="module")
def made() -> Iterator[tuple[WireProxy, Run, Run]]:
    """One proxy, one Responses and one Messages session, both compacted (read-only tests)."""
    with wire_proxy() as proxy:
        codex = run_responses(proxy)
        # 11 files: two level-1 rounds and no summary (the hidden extract round goes back
        # upstream on later turns, so a twelfth file would reach the summary)
        claude = run_messages(proxy, files=11)
        assert "toolcall" in codex.compactions and "toolcall" in claude.compactions
        yield proxy, codex, claude


def test_list_and_detail_name_the_wire(made: tuple[WireProxy, Run, Run]) -> None:
    proxy, codex, claude = made
    rows = {r["id"]: r for r in proxy.admin("GET", "/sessions").json()["data"]}
    assert rows[codex.session_id]["wire"] == "responses"
    assert rows[claude.session_id]["wire"] == "messages"
    assert proxy.detail(codex.session_id)["wire"] == "responses"
    assert proxy.detail(claude.session_id)["wire"] == "messages"


def test_detail_shows_items_without_opaque_payloads(made: tuple[WireProxy, Run, Run]) -> None:
    proxy, codex, claude = made
    for run, thought in ((codex, "reasoning"), (claude, "thinking")):
        resp = proxy.admin("GET", f"/sessions/{run.session_id}")
        blobs = opaque(run)
        assert len(blobs) >= 10 and not [b for b in blobs if b in resp.text]
        conversation = resp.json()["conversation"]
        turns = [m for m in conversation if m["role"] == "assistant"]
        assert turns and all("items" in m for m in turns)
        kinds = [[i["kind"] for i in m["items"]] for m in turns]
        assert kinds[0] == [thought, "call"]
        first = turns[0]["items"]
        assert first[1]["name"] == "read_file" and (
            "file_1." in first[1]["arguments"] or "file_01." in first[1]["arguments"]
        )
        assert first[0]["text"].startswith("Next")
        if thought == "reasoning":
            assert first[0]["encrypted"] is True and first[0]["encrypted_chars"] > 100
        else:
            assert first[0]["signed"] is True and first[0]["redacted"] is False
        # The text of a model turn is what to_history() shows: the call, never an x_items blob.
        assert turns[0]["content"].startswith("[tool call] read_file(")
        (mid,) = [m for m in conversation if m.get("system")]
        assert mid["content"] == REMINDER
        # (the proxy's answers to its hidden extract rounds are no client original)
        results = [m for m in conversation if m["role"] == "tool" and not m.get("hidden")]
        types = {m["wire_type"] for m in results}
        assert types == {"function_call_output" if run is codex else "tool_result"}
        assert any(m.get("compacted_id") for m in results)


def test_truncate_and_originals(made: tuple[WireProxy, Run, Run]) -> None:
    proxy, codex, claude = made
    for run in (codex, claude):
        full = proxy.detail(run.session_id)["conversation"]
        cut = proxy.detail(run.session_id, truncate="true")["conversation"]
        assert [m["role"] for m in cut] == [m["role"] for m in full]
        assert max(len(m["content"]) for m in full) > 1100 > max(len(m["content"]) for m in cut)
        placeholder = next(m for m in full if m.get("compacted_id"))
        key = placeholder["compacted_id"]
        original = proxy.admin("GET", f"/sessions/{run.session_id}/compacted/{key}").json()
        assert original["reclaimed"] is True and original["text"] == run.outputs[key]


def test_export_keeps_the_wire_and_every_original(made: tuple[WireProxy, Run, Run]) -> None:
    proxy, codex, claude = made
    for run, wire in ((codex, "responses"), (claude, "messages")):
        resp = proxy.admin("GET", f"/sessions/{run.session_id}/export")
        assert resp.status_code == 200 and resp.headers["x-xun-wire"] == wire
        saved = resp.json()
        assert saved["wire"] == wire
        conv = Conversation.loads(resp.text)
        assert len(conv.reclaimed_keys()) >= 2
        # The export is the session's full record: the opaque payloads are in it, unchanged.
        assert all(b in resp.text for b in opaque(run)[:3])


def test_metrics_and_logs_carry_the_wire(made: tuple[WireProxy, Run, Run]) -> None:
    proxy, codex, claude = made
    text = httpx.get(proxy.url + "/metrics").text
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    ok = {"method": "POST", "status": "200"}
    assert value("xun_requests_total", route="/v1/responses", wire="responses", **ok) == len(
        codex.compactions
    )
    assert value("xun_requests_total", route="/v1/messages", wire="messages", **ok) == len(
        claude.compactions
    )
    auto = {"level": "toolcall", "outcome": "success", "trigger": "auto"}
    assert value("xun_compactions_total", wire="responses", **auto) == codex.compactions.count(
        "toolcall"
    )
    assert value("xun_compactions_total", wire="messages", **auto) == claude.compactions.count(
        "toolcall"
    )
    assert not [k for k in samples if dict(k[1]).get("wire") not in (None, *WIRE_LABELS)]


WIRE_LABELS = ("chat", "responses", "messages", "none")


def test_the_json_log_line_names_the_wire() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger(ACCESS_LOGGER)
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        with wire_proxy() as proxy:
            run_responses(proxy, files=2)
            run_messages(proxy, files=2)
            # A refused body and a request without a session are counted under their wire too.
            bad = {"session-id": "x", "content-type": "application/json"}
            httpx.post(proxy.url + "/v1/responses", content=b"{", headers=bad)
            body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            httpx.post(proxy.url + "/v1/messages", json=body)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    by_path: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_path.setdefault(line["path"], []).append(line)
    responses, messages = by_path["/v1/responses"], by_path["/v1/messages"]
    assert {line["wire"] for line in responses} == {"responses"}
    assert {line["wire"] for line in messages} == {"messages"}
    assert {line["status"] for line in responses} == {200, 400}
    assert all(isinstance(line.get("session"), str) for line in responses if line["status"] == 200)


def test_a_state_saved_before_the_wire_was_noted_loads() -> None:
    state = SessionState(summary="S")
    data = state.to_dict()
    del data["wire"]
    loaded = SessionState.from_dict(data)
    assert loaded.wire is None and loaded.summary == "S"
    assert loaded.meta(3)["wire"] is None


# -- manual compaction in the session's own API -----------------------------------------------


def test_manual_compactions_of_a_responses_session() -> None:
    with wire_proxy(token_threshold=100_000) as proxy:
        codex = run_responses(proxy, files=6)
        assert set(codex.compactions) == {"none"}
        path = f"/sessions/{codex.session_id}/compact"
        resp = proxy.admin("POST", path, json={"mode": "toolcall", "keep": 1})
        assert resp.status_code == 200 and resp.json()["changed"] is True
        before = len(proxy.responses.responses_requests)
        resp = proxy.admin("POST", path, json={"mode": "summary", "model": "gpt-5-mini", "keep": 2})
        assert resp.status_code == 200, resp.text
        assert resp.json()["changed"] is True, resp.json()
        (summary,) = proxy.responses.responses_requests[before:]
        assert summary.json["store"] is False and summary.json["model"] == "gpt-5-mini"
        assert summary.headers["authorization"] == "Bearer sk-proxy-openai"
        assert not [i for i in input_items(summary.json) if i.get("type") == "reasoning"]
        assert ReadFiles.summary_marker(1) in proxy.detail(codex.session_id)["summary"]
        # The session goes on: the next turn of the same history carries the summary after
        # the client's instructions, and the reclaimed outputs as placeholders.
        items = codex.history
        proxy.responses.policy = ReadFiles(6, tool="read_file")
        body = {"model": "gpt-5-codex", "instructions": INSTRUCTIONS, "input": items}
        headers = {"authorization": "Bearer sk-client-openai", "session-id": "codex-1"}
        resp = httpx.post(proxy.url + "/v1/responses", json=body, headers=headers, timeout=30)
        assert resp.status_code == 200
        sent = proxy.responses.responses_requests[-1].json
        assert sent["instructions"].startswith(INSTRUCTIONS)
        assert ReadFiles.summary_marker(1) in sent["instructions"]
        assert resp.headers["x-xun-session"] == codex.session_id
        assert len(input_items(sent)) < len(items)


def test_manual_summary_of_a_messages_session_goes_to_anthropic() -> None:
    with wire_proxy(token_threshold=100_000) as proxy:
        claude = run_messages(proxy, files=6)
        assert set(claude.compactions) == {"none"}
        path = f"/sessions/{claude.session_id}/compact"
        before = len(proxy.messages.messages_requests)
        body = {"mode": "summary", "model": "claude-haiku-4-5", "keep": 2}
        resp = proxy.admin("POST", path, json=body)
        assert resp.status_code == 200 and resp.json()["changed"] is True, resp.text
        summaries = proxy.messages.messages_requests[before:]
        assert len(summaries) == 1 and not proxy.messages.refused
        (summary,) = summaries
        assert summary.headers["x-api-key"] == "sk-ant-proxy"
        assert summary.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in summary.headers
        assert summary.json["model"] == "claude-haiku-4-5" and summary.json["max_tokens"] > 0
        assert LAST_READ.search(proxy.detail(claude.session_id)["summary"])


def test_without_an_anthropic_key_a_messages_summary_waits_for_the_next_turn() -> None:
    with wire_proxy(token_threshold=100_000, anthropic_api_key=None) as proxy:
        claude = run_messages(proxy, files=3)
        path = f"/sessions/{claude.session_id}/compact"
        calls = len(proxy.messages.requests)
        resp = proxy.admin("POST", path, json={"mode": "summary", "model": "claude-haiku-4-5"})
        assert resp.status_code == 202, resp.text
        assert resp.json()["status"] == "pending"
        assert len(proxy.messages.requests) == calls  # the proxy has no key to call with
        assert proxy.detail(claude.session_id)["pending_summary"] is True


def test_sessions_cli_shows_the_wire(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with wire_proxy(store_url=url) as proxy:
        codex = run_responses(proxy, files=3)
        claude = run_messages(proxy, files=3)
    assert cli.main(["sessions", "ls", "--store", url]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["id", "tenant", "session", "wire"]
    wires = {row.split()[0]: row.split()[3] for row in rows}
    assert wires == {codex.session_id: "responses", claude.session_id: "messages"}
    for run, wire in ((codex, "responses"), (claude, "messages")):
        assert cli.main(["sessions", "show", run.session_id, "--store", url]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["wire"] == wire and shown["state"]["wire"] == wire
        assert cli.main(["sessions", "export", run.session_id, "--store", url]) == 0
        exported = SessionState.from_bytes(capsys.readouterr().out.encode())
        assert exported.wire == wire and exported.view_messages()
