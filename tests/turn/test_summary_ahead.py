"""Summaries prepared ahead: no turn waits for a summary (issue 28), on all three wires.

An agent runs 52 tool turns through the proxy (real uvicorn, the official SDKs, the wire's
faithful fake) with 0.4 s of tool work between turns; the upstream answers the agent at once
but takes 2.5 s to write a summary. Every tool output carries a unique marker, and the fake's
summaries list the markers they read, so a test can tell which client messages a summary
covers. Half-way the client branches: it resends an earlier prefix and goes on differently
(new markers), so a summary of the abandoned turns must never reach the model.

Checked per run: every request's latency, measured at the client, stays below half a
summary's delay; at least two summaries reach the model, and every marker the model sees
is in the history the client sent with that request; summary requests made <= summaries used
+ 3; the last request is at most 60 % of the client's history; and between compactions each
upstream request is the previous one plus what the client appended (the append-only check
of tests/turn/test_append_only.py).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import anthropic
import pytest

from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import SYSTEM, TOOLS, is_summary_request
from tests.support.claude_model import is_proxy_summary_request
from tests.support.fake_messages import FakeMessages
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_responses import FakeResponses, ResponsesRequest, input_items
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.turn.test_append_only import Log, append_only_problems

DELAY = 2.5  # seconds the upstream takes per summary
TURNS = 52
PAUSE = 0.4  # the agent's tool work between turns
BRANCH_AT = 26  # the turn that goes back
BRANCH_BACK = 3  # turns abandoned by the branch
SETTINGS: dict[str, Any] = {
    "token_threshold": 6000,
    "compactor": "cache-aware",
    "summary_ahead": True,
}
MARK = re.compile(r"artifact-\d{4}")
SUMMARY_ID = re.compile(r"SUMMARY-\d+")


def markers(value: Any) -> set[str]:
    return set(MARK.findall(json.dumps(value)))


class Outputs:
    """Tool outputs of about 600 characters, each with a marker of its own."""

    def __init__(self) -> None:
        self.ids = count(1)

    def __call__(self) -> str:
        mark = f"artifact-{next(self.ids):04d}"
        line = f"{mark}: " + "x" * 60 + "\n"
        return (line * 9)[:600]


class Summaries:
    """The fake model's summaries: a unique id and the markers of what it was asked about."""

    def __init__(self) -> None:
        self.made = 0

    def __call__(self, body: dict[str, Any]) -> str:
        self.made += 1
        found = " ".join(sorted(markers(body)))
        return f"## overview\nSUMMARY-{self.made} covers: {found}"


@dataclass
class Run:
    """What the client saw, turn by turn, and the upstream's requests."""

    latencies: list[float] = field(default_factory=list)
    history_marks: list[set[str]] = field(default_factory=list)
    compactions: list[str] = field(default_factory=list)
    # The upstream requests, one log before the branch and one from it on: the client's
    # branch rewrites the history once, as a compaction does.
    logs: list[Log] = field(default_factory=lambda: [Log()])
    last_client_body: dict[str, Any] = field(default_factory=dict)


def drive(
    send: Callable[[], tuple[dict[str, Any], str]],
    history: list[Any],
    fake: FakeUpstream,
    path: str,
    main: Callable[[dict[str, Any]], bool],
) -> Run:
    """Run the agent: `send()` makes one request, appends the answer and the tool outputs to
    `history`, and returns the body it sent and the proxy's compaction header."""
    run = Run()
    lengths: list[int] = []
    for turn in range(TURNS):
        if turn == BRANCH_AT:
            del history[lengths[-BRANCH_BACK] :]  # resend an earlier prefix, go on differently
            run.logs.append(Log())
        lengths.append(len(history))
        start = len(fake.requests)
        began = time.perf_counter()
        body, compaction = send()
        run.latencies.append(time.perf_counter() - began)
        run.last_client_body = body
        run.history_marks.append(markers(body))
        run.compactions.append(compaction)
        bodies = [r.json for r in fake.requests[start:] if r.path == path and main(r.json)]
        run.logs[-1].add(compaction, bodies)
        time.sleep(PAUSE)
    return run


def check(run: Run, fake: FakeUpstream, path: str, main: Callable[[dict[str, Any]], bool]) -> None:
    # (The first request pays the proxy's and the fake's warm-up; no summary exists before it.)
    slow = [(i, round(t, 2)) for i, t in enumerate(run.latencies) if i and t >= DELAY / 2]
    assert not slow, f"requests waited for a summary: {slow}"
    used: set[str] = set()
    served_all = [served for log in run.logs for served in log.served]
    for n, served in enumerate(served_all):
        for body in served.bodies:
            foreign = markers(body) - run.history_marks[n]
            assert not foreign, f"turn {n}: a summary covers messages the client dropped"
            used |= set(SUMMARY_ID.findall(json.dumps(body)))
    requests = [r.json for r in fake.requests if r.path == path]
    made = sum(1 for body in requests if not main(body))
    shown = "".join(c[0] for c in run.compactions)  # n(one), t(oolcall), s(ummary)
    assert len(used) >= 2, (used, shown)
    assert made <= len(used) + 3, (made, used)
    last = served_all[-1].bodies[-1]
    share = len(json.dumps(last)) / len(json.dumps(run.last_client_body))
    assert share <= 0.6, share
    checked = 0
    for log in run.logs:
        problems, pairs, _ = append_only_problems(log, history_field(path))
        assert problems == [], problems
        checked += pairs
    assert checked >= 30, checked


def history_field(path: str) -> str:
    return {"/v1/chat/completions": "messages", "/v1/responses": "input"}.get(path, "messages")


# --- Chat Completions ------------------------------------------------------------------------


class ChatModel:
    def __init__(self) -> None:
        self.summaries = Summaries()
        self.turn = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply.text(self.summaries(body), delay=DELAY)
        self.turn += 1
        calls = [("read_file", json.dumps({"path": f"src/f{self.turn}_{k}.py"})) for k in (1, 2)]
        return Reply(tool_calls=calls)


def chat_message(raw: Any, stream: bool) -> dict[str, Any]:
    if not stream:
        message: dict[str, Any] = raw.parse().choices[0].message.model_dump(exclude_none=True)
        return message
    content, calls = "", {}
    for chunk in raw.parse():
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": tc.id, "arguments": ""})
                slot["name"] = slot.get("name") or tc.function.name
                slot["arguments"] += tc.function.arguments or ""
    return {
        "role": "assistant",
        "content": content or None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls.values()
        ],
    }


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_no_turn_waits_for_a_summary(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
) -> None:
    fake_upstream.default = ChatModel()
    proxy = make_proxy(**SETTINGS)
    client = openai_client(proxy, session=f"ahead-chat-{stream}")
    outputs = Outputs()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read the source files one by one."},
    ]

    def send() -> tuple[dict[str, Any], str]:
        body = {"model": "gpt-4o", "messages": list(history), "tools": TOOLS}
        raw = client.chat.completions.with_raw_response.create(**body, stream=stream)
        message = chat_message(raw, stream)
        history.append(message)
        for call in message.get("tool_calls") or []:
            history.append({"role": "tool", "tool_call_id": call["id"], "content": outputs()})
        return body, raw.headers["x-xun-compaction"]

    path = "/v1/chat/completions"
    run = drive(send, history, fake_upstream, path, lambda b: not is_summary_request(b))
    print(run.compactions, [round(t, 2) for t in run.latencies])
    check(run, fake_upstream, path, lambda b: not is_summary_request(b))


# --- Responses API ---------------------------------------------------------------------------

READ_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}


def responses_main(body: dict[str, Any]) -> bool:
    return not ResponsesRequest(body, input_items(body), {}).is_summary_request()


class ResponsesModel:
    def __init__(self) -> None:
        self.summaries = Summaries()
        self.turn = 0

    def __call__(self, request: ResponsesRequest) -> ResponsesTurn:
        if request.is_summary_request():
            return ResponsesTurn(text=self.summaries(request.body), delay=DELAY)
        self.turn += 1
        calls = [("read_file", {"path": f"src/f{self.turn}_{k}.py"}) for k in (1, 2)]
        return ResponsesTurn(calls=list(calls))


def test_responses_no_turn_waits_for_a_summary(
    make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    with FakeResponses() as fake:
        fake.policy = ResponsesModel()
        proxy = make_proxy(upstream_base_url=fake.url, **SETTINGS)
        client = openai_client(proxy, session="ahead-responses")
        outputs = Outputs()
        items: list[dict[str, Any]] = [
            {"role": "developer", "content": SYSTEM},
            {"role": "user", "content": "Read the source files one by one."},
        ]

        def send() -> tuple[dict[str, Any], str]:
            body = {"model": "gpt-4.1", "input": list(items), "tools": [READ_TOOL], "store": False}
            raw = client.responses.with_raw_response.create(**body)
            for item in raw.parse().output:
                items.append(item.model_dump(exclude_none=True))
                if item.type == "function_call":
                    out = {"type": "function_call_output", "call_id": item.call_id}
                    items.append(out | {"output": outputs()})
            return body, raw.headers["x-xun-compaction"]

        run = drive(send, items, fake, "/v1/responses", responses_main)
        check(run, fake, "/v1/responses", responses_main)


# --- Anthropic Messages ----------------------------------------------------------------------

MESSAGES_TOOL: dict[str, Any] = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}


def messages_main(body: dict[str, Any]) -> bool:
    return not is_proxy_summary_request(body)


class MessagesModel:
    def __init__(self) -> None:
        self.summaries = Summaries()
        self.turn = 0

    def __call__(self, body: dict[str, Any]) -> MessagesTurn:
        if is_proxy_summary_request(body):
            return MessagesTurn.text(self.summaries(body), delay=DELAY)
        self.turn += 1
        uses = [
            {"type": "tool_use", "name": "read_file", "input": {"path": f"src/f{self.turn}_{k}.py"}}
            for k in (1, 2)
        ]
        return MessagesTurn(content=uses)


def test_messages_no_turn_waits_for_a_summary(make_proxy: MakeProxy) -> None:
    with FakeMessages() as fake:
        fake.policy = MessagesModel()
        proxy = make_proxy(anthropic_base_url=fake.base_url, **SETTINGS)
        client = anthropic.Anthropic(
            base_url=proxy.url,
            api_key="sk-ant-client",
            default_headers={"x-claude-code-session-id": "ahead-messages"},
            max_retries=0,
        )
        outputs = Outputs()
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Read the source files one by one."}
        ]

        def send() -> tuple[dict[str, Any], str]:
            body = {
                "model": "claude-opus-4-8",
                "max_tokens": 1024,
                "system": SYSTEM,
                "tools": [MESSAGES_TOOL],
                "messages": list(messages),
            }
            raw = client.messages.with_raw_response.create(**body)
            blocks = [b.model_dump(exclude_none=True) for b in raw.parse().content]
            messages.append({"role": "assistant", "content": blocks})
            results = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": outputs()}
                for b in blocks
                if b["type"] == "tool_use"
            ]
            messages.append({"role": "user", "content": results})
            return body, raw.headers["x-xun-compaction"]

        try:
            run = drive(send, messages, fake, "/v1/messages", messages_main)
            check(run, fake, "/v1/messages", messages_main)
        finally:
            client.close()
