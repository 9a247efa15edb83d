"""Savings you can check: a 30-turn tool session through the proxy against the fake upstream,
whose usage follows a known rule (`count_prompt_tokens`). What the upstream billed and what
the client's own requests would have been billed directly are computed here from that rule;
`/admin/savings`, `xun-proxy report` (on the stopped proxy's SQLite file) and `/metrics` must
tell the same story."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cli import main
from tests.support.agent import TOOLS, Agent, ModelScript, is_summary_request
from tests.support.fake_upstream import FakeUpstream, count_prompt_tokens

TURNS = 30


class RecordingAgent(Agent):
    """An agent that keeps what each of its requests carried."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[dict[str, Any]] = []

    def step(self, **extra: Any) -> Any:
        self.sent.append({"messages": json.loads(json.dumps(self.messages)), "tools": TOOLS})
        return super().step(**extra)


def metric(text: str, name: str, model: str) -> float:
    m = re.search(rf'^{name}{{model="{re.escape(model)}"}} (\S+)$', text, re.MULTILINE)
    assert m is not None, f"{name} for {model} not in /metrics"
    return float(m.group(1))


def test_thirty_tool_turns_saved_what_the_bills_say(
    fake_upstream: FakeUpstream,
    make_proxy: Any,
    openai_client: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_upstream.default = ModelScript()
    db = tmp_path / "sessions.db"
    proxy = make_proxy(token_threshold=8000, store_url=f"sqlite:///{db}")
    agent = RecordingAgent(openai_client(proxy, session="savings-30"), output_size=2000)
    agent.run(TURNS)

    upstream = [r.json for r in fake_upstream.chat_requests]
    billed = sum(count_prompt_tokens(body) for body in upstream)
    direct = sum(count_prompt_tokens(body) for body in agent.sent)
    expected = direct - billed
    assert any(is_summary_request(body) for body in upstream)  # summaries were paid for
    assert expected > 0.3 * direct  # the session did compact

    with httpx.Client(base_url=proxy.url) as http:
        report = http.get("/admin/savings").json()
        by_session = http.get("/admin/savings", params={"by": "session", "since": "1h"}).json()
        metrics_text = http.get("/metrics").text
        detail = http.get(f"/admin/sessions/{by_session['groups'][0]['key']}").json()
    totals = report["totals"]
    print("billed", billed, "direct", direct, "saved", expected, "reported", totals)
    assert totals["requests"] == TURNS
    # Every prompt token the upstream billed, main requests and summary calls included.
    assert totals["prompt_tokens_sent"] == billed
    assert abs(totals["prompt_tokens_direct"] - direct) <= 0.15 * direct
    assert abs(totals["tokens_saved"] - expected) <= 0.15 * expected
    assert totals["summary_prompt_tokens"] > 0
    # gpt-4o is priced: money follows the tokens (no cache on either side here).
    assert totals["cost_saved"] == pytest.approx(totals["tokens_saved"] * 2.5 / 1e6, rel=1e-3)
    assert totals["cost_saved"] == pytest.approx(
        totals["cost_direct"] - totals["cost_sent"], abs=1e-6
    )
    assert report["groups"][0]["key"] == "gpt-4o"
    assert sum(point["requests"] for point in report["series"]) == TURNS
    assert report["projected"]["requests"] == 0
    assert by_session["groups"][0]["session"] == "savings-30"
    assert by_session["totals"]["tokens_saved"] == totals["tokens_saved"]
    assert detail["savings"]["tokens_saved"] == totals["tokens_saved"]
    assert all("savings" in turn for turn in detail["turns"])

    assert metric(metrics_text, "xun_prompt_tokens_sent_total", "gpt-4o") == billed
    saved_metric = metric(metrics_text, "xun_prompt_tokens_saved_total", "gpt-4o")
    assert saved_metric == totals["tokens_saved"]
    assert (
        metric(metrics_text, "xun_prompt_tokens_direct_total", "gpt-4o")
        == (totals["prompt_tokens_direct"])
    )
    assert metric(metrics_text, "xun_cost_saved_total", "gpt-4o") == pytest.approx(
        totals["cost_saved"],
        abs=1e-4,  # each turn's money is rounded to 6 places
    )

    proxy.stop()  # the report reads the stopped proxy's file
    capsys.readouterr()
    assert main(["report", "--store", f"sqlite:///{db}", "--format", "json", "--since", "24h"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["totals"] == totals
    assert main(["report", "--store", f"sqlite:///{db}", "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("model,requests,prompt_tokens_sent")
    assert rows[-1].startswith(f"TOTAL,{TURNS},{billed},")
    assert main(["report", "--store", f"sqlite:///{db}", "--by", "session"]) == 0
    table = capsys.readouterr().out
    assert "TOTAL" in table and str(totals["tokens_saved"]) in table
