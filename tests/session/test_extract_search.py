"""The extract tool's search and reads end to end on all three wires, streamed and not (issue 35):
real uvicorn, the official SDKs, the fakes, through `test_extract_wires`' runs.

A history whose head a summary cuts (a user message, an assistant message, a tool call and its
result) and whose tail holds a reclaimed result: the model searches for a literal of each in
one hidden round, and the proxy answers from the client's own request, unseen by the client.
A search never finds another session's or another tenant's content; a 100 KB original comes
in pages; with `extract_tool: always` the tools block is the same bytes in every request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from proxy.rules import SUMMARY_PROMPT
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.session.test_extract_wires import (
    CHAT_TOOLS,
    FUNCTION,
    READ,
    chat_run,
    messages_run,
    responses_run,
)
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_responses import ResponsesRequest
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import FakeUpstream, Reply

# Two user turns before the cut, so the summary's cut is not a lone user message kept aside.
SEARCH = {"token_threshold": 4000, "toolcall_keep_max": 1, "summary_keep_max": 4}
FILL = "filler words " * 800  # about 2.6k tokens: reclaiming alone does not bring it under
# What the model searches for, by call id: a literal of each kind of thing compaction took.
QUERIES = {
    "s_user": "userneedlealpha",  # any case
    "s_assistant": "ASSISTANTNEEDLEBETA",
    "s_call": "CallNeedleEpsilon",
    "s_tool": "toolneedlegamma",
    "s_reclaimed": "ReclaimNeedleDelta",
}
LITERALS = {
    "s_user": "UserNeedleAlpha",
    "s_assistant": "AssistantNeedleBeta",
    "s_call": "CallNeedleEpsilon",
    "s_tool": "ToolNeedleGamma",
    "s_reclaimed": "ReclaimNeedleDelta",
}
SUMMARY_MARK = SUMMARY_PROMPT.splitlines()[0][:60]


def _dumped(body: Any) -> str:
    return orjson.dumps(body).decode()


def is_summary(body: Any) -> bool:
    return SUMMARY_MARK in _dumped(body)


def answered(body: Any) -> bool:
    """The proxy answered the model's searches in this request (the continuation round)."""
    return "s_user" in _dumped(body)


@pytest.fixture
def headers() -> dict[str, str]:
    return {"X-Session-Id": "extract-search"}


def _check_answers(answers: dict[str, str], ids: dict[str, str]) -> None:
    """Each search found its literal, and names the item by the id the model reads it with."""
    for call_id, literal in LITERALS.items():
        text = answers[call_id]
        assert literal in text, (call_id, text[:300])
        assert f"- {ids[call_id]} (turn " in text, (call_id, text[:300])
        assert not text.startswith("No match")


def _check_first(sent: str) -> None:
    """What the first request sent upstream lacked: each literal was summarised or reclaimed
    (but the path the cut call read, which the summary's artifact trail lists)."""
    for call_id, literal in LITERALS.items():
        assert call_id == "s_call" or literal not in sent, literal


# -- Chat Completions ---------------------------------------------------------------------


def _read(call_id: str, path: str) -> dict[str, Any]:
    function = {"name": "read", "arguments": orjson.dumps({"path": path}).decode()}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def chat_search_history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug. UserNeedleAlpha " + FILL},
        {"role": "assistant", "content": "Plan: AssistantNeedleBeta " + FILL},
        {"role": "user", "content": "Go on."},
        _read("c1", "src/CallNeedleEpsilon.py"),
        {"role": "tool", "tool_call_id": "c1", "content": "ToolNeedleGamma " + FILL[:4000]},
        _read("c2", "b.py"),
        {"role": "tool", "tool_call_id": "c2", "content": "ReclaimNeedleDelta " + FILL[:4000]},
        _read("c3", "c.py"),
        {"role": "tool", "tool_call_id": "c3", "content": "short"},
    ]


CHAT_IDS = {
    "s_user": "msg:1",
    "s_assistant": "msg:2",
    "s_call": "call:c1",
    "s_tool": "c1",
    "s_reclaimed": "c2",
}


def chat_model(body: dict[str, Any]) -> Reply:
    if is_summary(body):
        return Reply.text("## overview\nsummary")
    if answered(body):
        return Reply.text("done")
    calls = [
        {"name": EXTRACT_TOOL_NAME, "arguments": {"query": q}, "id": i} for i, q in QUERIES.items()
    ]
    return Reply(tool_calls=calls)


@pytest.fixture
def chat_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def chat_main(fake: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in fake.chat_requests if r.json and not is_summary(r.json)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_search_finds_what_a_summary_cut_and_what_was_reclaimed(
    chat_fake: FakeUpstream, headers: dict[str, str], stream: bool
) -> None:
    chat_fake.default = chat_model
    history = chat_search_history()
    completion = chat_run(chat_fake, headers, CHAT_TOOLS, stream, history=history, **SEARCH)
    message = completion.choices[0].message
    assert message.content == "done" and message.tool_calls is None  # the client sees no round
    first, second = chat_main(chat_fake)
    _check_first(_dumped(first["messages"]))
    answers = {m["tool_call_id"]: m["content"] for m in second["messages"] if m["role"] == "tool"}
    _check_answers(answers, CHAT_IDS)
    assert first["tools"] == second["tools"] and first["tools"][-1]["function"]["name"] == (
        EXTRACT_TOOL_NAME
    )


# -- Anthropic Messages -------------------------------------------------------------------


def _use(tool_id: str, path: str, text: str | None = None) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": "read", "input": {"path": path}}
    return {
        "role": "assistant",
        "content": [*([{"type": "text", "text": text}] if text else []), block],
    }


def _result(tool_id: str, content: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": content}],
    }


def messages_search_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Fix the bug. UserNeedleAlpha " + FILL},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Plan: AssistantNeedleBeta " + FILL}],
        },
        {"role": "user", "content": "Go on."},
        _use("toolu_1", "src/CallNeedleEpsilon.py"),
        _result("toolu_1", "ToolNeedleGamma " + FILL[:4000]),
        _use("toolu_2", "b.py"),
        _result("toolu_2", "ReclaimNeedleDelta " + FILL[:4000]),
        _use("toolu_3", "c.py"),
        _result("toolu_3", "short"),
    ]


MESSAGES_IDS = {
    "s_user": "msg:0",
    "s_assistant": "msg:1",
    "s_call": "call:toolu_1",
    "s_tool": "toolu_1",
    "s_reclaimed": "toolu_2",
}


def messages_model(body: dict[str, Any]) -> MessagesTurn:
    if is_summary(body):
        return MessagesTurn.text("## overview\nsummary")
    if answered(body):
        return MessagesTurn.text("done")
    uses = [
        {"type": "tool_use", "name": EXTRACT_TOOL_NAME, "input": {"query": q}, "id": i}
        for i, q in QUERIES.items()
    ]
    return MessagesTurn(content=uses)


def _messages_answers(body: dict[str, Any]) -> dict[str, str]:
    found = {}
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                content = block.get("content")
                text = content if isinstance(content, str) else _dumped(content)
                found[block["tool_use_id"]] = text
    return found


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_search_finds_what_a_summary_cut_and_what_was_reclaimed(
    headers: dict[str, str], stream: bool
) -> None:
    reply, main = messages_run(
        headers,
        [READ],
        stream=stream,
        history=messages_search_history(),
        policy=messages_model,
        **SEARCH,
    )
    assert [(b.type, getattr(b, "text", None)) for b in reply.content] == [("text", "done")]
    first, second = [body for body in main if not is_summary(body)]
    _check_first(_dumped([first["system"], first["messages"]]))
    _check_answers(_messages_answers(second), MESSAGES_IDS)
    assert first["tools"] == second["tools"] and first["tools"][-1]["name"] == EXTRACT_TOOL_NAME


# -- Responses ----------------------------------------------------------------------------


def responses_search_input() -> list[dict[str, Any]]:
    def call(call_id: str, path: str) -> dict[str, Any]:
        arguments = orjson.dumps({"path": path}).decode()
        return {"type": "function_call", "call_id": call_id, "name": "read", "arguments": arguments}

    def output(call_id: str, text: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": text}

    return [
        {"role": "user", "content": "Fix the bug. UserNeedleAlpha " + FILL},
        {"role": "assistant", "content": "Plan: AssistantNeedleBeta " + FILL},
        {"role": "user", "content": "Go on."},
        call("call_1", "src/CallNeedleEpsilon.py"),
        output("call_1", "ToolNeedleGamma " + FILL[:4000]),
        call("call_2", "b.py"),
        output("call_2", "ReclaimNeedleDelta " + FILL[:4000]),
        call("call_3", "c.py"),
        output("call_3", "short"),
    ]


RESPONSES_IDS = {
    "s_user": "msg:0",
    "s_assistant": "msg:1",
    "s_call": "call:call_1",
    "s_tool": "call_1",
    "s_reclaimed": "call_2",
}


def responses_model(request: ResponsesRequest) -> ResponsesTurn:
    if is_summary(request.body):
        return ResponsesTurn(text="## overview\nsummary")
    if answered(request.body):
        return ResponsesTurn(text="done")
    return ResponsesTurn(calls=[(EXTRACT_TOOL_NAME, {"query": q}, i) for i, q in QUERIES.items()])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_responses_search_finds_what_a_summary_cut_and_what_was_reclaimed(
    headers: dict[str, str], stream: bool
) -> None:
    response, main = responses_run(
        headers,
        [FUNCTION],
        stream=stream,
        history=responses_search_input(),
        policy=responses_model,
        **SEARCH,
    )
    assert response.output_text == "done"
    assert all(getattr(i, "name", None) != EXTRACT_TOOL_NAME for i in response.output)
    first, second = [body for body in main if not is_summary(body)]
    _check_first(_dumped([first.get("instructions"), first["input"]]))
    answers = {
        i["call_id"]: i["output"]
        for i in second["input"]
        if i.get("type") == "function_call_output"
    }
    _check_answers(answers, RESPONSES_IDS)
    assert first["tools"] == second["tools"] and first["tools"][-1]["name"] == EXTRACT_TOOL_NAME
