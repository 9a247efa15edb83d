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
from tests.support.claude_model import ReadFilesModel
from tests.support.fake_messages import FakeMessages
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import FakeUpstream, Reply, count_prompt_tokens
from tests.support.wire_sessions import (
    MESSAGES_MODEL,
    MESSAGES_SYSTEM,
    MESSAGES_TOOL,
    messages_file,
    wire_proxy,
)

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
    # The session did compact (the proxy's tool, in every request, costs about 1 % of direct).
    assert expected > 0.25 * direct

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


def _with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as Claude Code sends it: a cache breakpoint on the last message's last block."""
    out = json.loads(json.dumps(messages))
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def test_a_messages_session_with_a_prompt_cache_against_its_direct_bills() -> None:
    """Anthropic Messages, with cache breakpoints: each client request also goes to a second
    fake directly, whose bills (cache reads and writes included) the report's direct side
    must match; an extract round and summary calls are billed to the proxy."""
    paths = [f"src/file_{n:02d}.py" for n in range(1, 21)]
    headers = {
        "x-api-key": "sk-ant-client",
        "anthropic-version": "2023-06-01",
        "x-claude-code-session-id": "claude-savings",
    }
    model = ReadFilesModel(paths, tool="read_file", path_key="path", thinking=False)
    direct_bills: list[dict[str, int]] = []
    with wire_proxy() as proxy, FakeMessages() as direct, httpx.Client(timeout=30) as client:
        proxy.messages.policy = model
        direct.policy = ReadFilesModel(paths, tool="read_file", path_key="path", thinking=False)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files in order."}]
        for _ in paths:
            body = {
                "model": MESSAGES_MODEL,
                "max_tokens": 1024,
                "system": MESSAGES_SYSTEM,
                "tools": [MESSAGES_TOOL],
                "messages": _with_breakpoint(messages),
            }
            resp = client.post(proxy.url + "/v1/messages", json=body, headers=headers)
            assert resp.status_code == 200, resp.text
            usage = client.post(direct.base_url + "/v1/messages", json=body, headers=headers)
            direct_bills.append(usage.json()["usage"])
            reply = resp.json()
            messages.append({"role": "assistant", "content": reply["content"]})
            calls = [b for b in reply["content"] if b["type"] == "tool_use"]
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": c["id"],
                            "content": messages_file(c["input"]["path"]),
                        }
                        for c in calls
                    ],
                }
            )
        report = proxy.admin("GET", "/savings").json()

    billed = sum(proxy.messages.input_tokens(r.json) for r in proxy.messages.messages_requests)
    direct_prompt = sum(
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in direct_bills
    )
    direct_read = sum(u["cache_read_input_tokens"] for u in direct_bills)
    direct_written = sum(u["cache_creation_input_tokens"] for u in direct_bills)
    totals = report["totals"]
    print("direct", direct_prompt, direct_read, direct_written, "report", totals)
    assert model.extracted and model.proxy_summaries  # an extract round, summary calls
    assert totals["requests"] == len(paths)
    assert totals["prompt_tokens_sent"] == billed  # requests, the extract round, summaries
    assert totals["extract_prompt_tokens"] > 0 and totals["summary_prompt_tokens"] > 0
    assert abs(totals["prompt_tokens_direct"] - direct_prompt) <= 0.05 * direct_prompt
    saved = direct_prompt - billed
    assert abs(totals["tokens_saved"] - saved) <= 0.15 * abs(saved)
    assert abs(totals["cache_read_tokens_direct"] - direct_read) <= 0.15 * direct_read
    assert abs(totals["cache_write_tokens_direct"] - direct_written) <= 0.15 * direct_written
    # Its money is checked against figures worked out by hand: `test_money_on_every_wire...`.


# Two turns of one session on each wire, nothing compacted (the threshold is far off), the
# client only appending between them. Each upstream answer reports (scripted below):
#   turn 1: 10,000 prompt tokens, 0 read from the cache, 8,000 written into it (2,000 neither);
#   turn 2: 12,000 prompt tokens, 8,000 read, 3,000 written (1,000 neither).
# Messages reports the three parts apart (its `input_tokens` is the part neither read nor
# written); Chat and Responses report the whole prompt with the read and written parts in it.
SCRIPTED = [(10_000, 0, 8_000), (12_000, 8_000, 3_000)]
# The direct side (proxy.session.savings_record): the client's request is what the proxy sent, so
# its prompt is what was billed: 10,000, then 12,000. Turn 1 reads nothing (no earlier
# request); its writes take this turn's written share of the uncached prompt, 8,000 / 10,000:
# 8,000. Turn 2 only appended to a session whose upstream caches: turn 1's direct request,
# 10,000, is read (capped at this turn's 12,000), and the written share, 3,000 / (12,000 -
# 8,000) = 0.75, of the 2,000 left: 1,500.
#   sent:   prompt 22,000, read 8,000,  written 11,000
#   direct: prompt 22,000, read 10,000, written 9,500
# Money per million tokens, (input, cache read, cache write): gpt-5 (1.25, 0.125, 1.25),
# claude-sonnet-4 (3.00, 0.30, 3.75); a token read or written is billed at that price only.
#   gpt-5, sent:   turn 1  2,000 x 1.25 + 8,000 x 1.25                    = 12,500
#                  turn 2  1,000 x 1.25 + 8,000 x 0.125 + 3,000 x 1.25    =  6,000
#                  $18,500 / 1e6 = 0.0185
#   gpt-5, direct: turn 1  12,500;  turn 2  500 x 1.25 + 10,000 x 0.125 + 1,500 x 1.25
#                  = 625 + 1,250 + 1,875 = 3,750;  $16,250 / 1e6 = 0.01625
#   sonnet, sent:  turn 1  2,000 x 3 + 8,000 x 3.75                       = 36,000
#                  turn 2  1,000 x 3 + 8,000 x 0.3 + 3,000 x 3.75         = 16,650
#                  $52,650 / 1e6 = 0.05265
#   sonnet, direct: turn 1 36,000;  turn 2  500 x 3 + 10,000 x 0.3 + 1,500 x 3.75
#                  = 1,500 + 3,000 + 5,625 = 10,125;  $46,125 / 1e6 = 0.046125
TOKENS = {
    "prompt_tokens_sent": 22_000,
    "cache_read_tokens_sent": 8_000,
    "cache_write_tokens_sent": 11_000,
    "prompt_tokens_direct": 22_000,
    "cache_read_tokens_direct": 10_000,
    "cache_write_tokens_direct": 9_500,
    "tokens_saved": 0,
}
MONEY = {
    "gpt-5": {"cost_sent": 0.0185, "cost_direct": 0.01625, "cost_saved": -0.00225},
    "claude-sonnet-4": {"cost_sent": 0.05265, "cost_direct": 0.046125, "cost_saved": -0.006525},
}


def _chat_session(fake: FakeUpstream, make_proxy: Any) -> dict[str, Any]:
    for prompt, read, written in SCRIPTED:
        details = {"cached_tokens": read, "cache_write_tokens": written}
        usage = {"prompt_tokens": prompt, "prompt_tokens_details": details}
        fake.push(Reply.text("Done.", usage_override=usage))
    proxy = make_proxy(token_threshold=100_000)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    with httpx.Client(base_url=proxy.base_url, headers={"x-session-id": "money"}) as http:
        for _ in SCRIPTED:
            resp = http.post("/chat/completions", json={"model": "gpt-5.6", "messages": messages})
            assert resp.status_code == 200, resp.text
            answer = resp.json()["choices"][0]["message"]
            messages += [answer, {"role": "user", "content": "Go on."}]
        totals: dict[str, Any] = httpx.get(proxy.url + "/admin/savings").json()["totals"]
    return totals


def _responses_session() -> dict[str, Any]:
    with wire_proxy(token_threshold=100_000) as proxy, httpx.Client(timeout=30) as http:
        for prompt, read, written in SCRIPTED:
            details = {"cached_tokens": read, "cache_write_tokens": written}
            usage = {"input_tokens": prompt, "input_tokens_details": details}
            proxy.responses.push_turns(ResponsesTurn(text="Done.", usage_override=usage))
        items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
        headers = {"authorization": "Bearer sk-client-openai", "session-id": "money"}
        for _ in SCRIPTED:
            body = {"model": "gpt-5.6", "input": items, "store": False}
            resp = http.post(proxy.url + "/v1/responses", json=body, headers=headers)
            assert resp.status_code == 200, resp.text
            items += resp.json()["output"] + [{"role": "user", "content": "Go on."}]
        totals: dict[str, Any] = proxy.admin("GET", "/savings").json()["totals"]
    return totals


def _messages_session() -> dict[str, Any]:
    with wire_proxy(token_threshold=100_000) as proxy, httpx.Client(timeout=30) as http:
        for prompt, read, written in SCRIPTED:
            usage = {
                "input_tokens": prompt - read - written,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written,
            }
            proxy.messages.push_turns(MessagesTurn.text("Done.", usage_override=usage))
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
        headers = {
            "x-api-key": "sk-ant-client",
            "anthropic-version": "2023-06-01",
            "x-claude-code-session-id": "money",
        }
        for _ in SCRIPTED:
            body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}
            resp = http.post(proxy.url + "/v1/messages", json=body, headers=headers)
            assert resp.status_code == 200, resp.text
            messages += [
                {"role": "assistant", "content": resp.json()["content"]},
                {"role": "user", "content": "Go on."},
            ]
        totals: dict[str, Any] = proxy.admin("GET", "/savings").json()["totals"]
    return totals


@pytest.mark.parametrize(
    ("wire", "priced_as"),
    [("chat", "gpt-5"), ("responses", "gpt-5"), ("messages", "claude-sonnet-4")],
)
def test_money_on_every_wire_matches_the_bills_worked_out_by_hand(
    wire: str, priced_as: str, fake_upstream: FakeUpstream, make_proxy: Any
) -> None:
    if wire == "chat":
        totals = _chat_session(fake_upstream, make_proxy)
    else:
        totals = _responses_session() if wire == "responses" else _messages_session()
    print(wire, totals)
    assert totals["requests"] == len(SCRIPTED)
    assert {name: totals[name] for name in TOKENS} == TOKENS
    for name, value in MONEY[priced_as].items():
        assert totals[name] == pytest.approx(value, abs=1e-9), name


def test_streamed_turns_are_counted_too(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy()
    client = openai_client(proxy, session="streamed")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Say something. " * 50}]
    for _ in range(3):
        stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "More."}]
    billed = sum(count_prompt_tokens(r.json) for r in fake_upstream.chat_requests)
    totals = httpx.get(proxy.url + "/admin/savings").json()["totals"]
    # Nothing compacted: what was sent is what direct would have sent.
    assert (totals["requests"], totals["prompt_tokens_sent"]) == (3, billed)
    assert totals["prompt_tokens_direct"] == billed and totals["tokens_saved"] == 0


def test_a_bad_window_or_grouping_is_a_400_in_openais_shape(make_proxy: Any) -> None:
    proxy = make_proxy()
    for params, param in (({"since": "yesterday"}, "since"), ({"by": "colour"}, "by")):
        resp = httpx.get(proxy.url + "/admin/savings", params=params)
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param
    naive = httpx.get(proxy.url + "/admin/savings", params={"until": "2026-01-01T00:00:00"})
    assert naive.status_code == 400 and "offset" in naive.json()["error"]["message"]


BAD_TIMES = ["nan", "inf", "-inf", "1e20", "9" * 400, "99999999999999999w", "1" + "0" * 2000]


@pytest.mark.parametrize("param", ["since", "until"])
@pytest.mark.parametrize("value", BAD_TIMES, ids=lambda v: v[:20])
def test_a_time_out_of_range_is_a_400_invalid_time(make_proxy: Any, param: str, value: str) -> None:
    proxy = make_proxy()
    resp = httpx.get(proxy.url + "/admin/savings", params={param: value})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_time", param)
    assert "out of range" in error["message"]


@pytest.mark.parametrize(
    "params",
    [{"since": "1700000000", "until": "1600000000"}, {"since": "2999-01-01T00:00:00Z"}],
)
def test_a_window_that_ends_before_it_starts_is_a_400(make_proxy: Any, params: Any) -> None:
    proxy = make_proxy()
    resp = httpx.get(proxy.url + "/admin/savings", params=params)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_time", "until")
    assert "before it starts" in error["message"]


@pytest.mark.parametrize(
    "flags",
    [
        *([f"--since={v}"] for v in BAD_TIMES),
        ["--until", "1e20"],
        ["--since", "1700000000", "--until", "1600000000"],
    ],
    ids=lambda f: " ".join(f)[:30],
)
def test_the_report_command_refuses_a_bad_time_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    code = main(["report", "--store", f"sqlite:///{tmp_path / 's.db'}", *flags])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("xun-proxy: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
