"""The extract tool end to end on all three wires: real uvicorn, the official SDKs, the fakes.

Issue 26 item 4: a reclaimed multi-part tool result comes back from the proxy's extract tool
as it was sent (Anthropic blocks with their image, Responses input parts, a shell call's
output; Chat text parts), never as a lossy text. Item 8: a client that defines a tool named
`extract_compacted_tool_result` itself gets no level-1 placeholder sending the model to it,
its tool list goes up as sent, and the model's calls to that tool reach the client.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import anthropic
import openai
import pytest

from proxy.rules import placeholder_for
from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import proxy_settings
from tests.support.agent import is_summary_request
from tests.support.claude_checks import messages_settings
from tests.support.fake_messages import FakeMessages
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_responses import FakeResponses, ResponsesRequest
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.servers import UvicornThread

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()
BIG = "line of a long tool output\n" * 700  # about 4.7k tokens: over the threshold, one page
SETTINGS = {"token_threshold": 4000, "toolcall_keep_max": 1, "compactor": "seed"}
PLACEHOLDER = "[Compacted, ID: "
# A client's own tool of the proxy's tool's name (e.g. another proxy in front of this one).
OWN_SCHEMA = {
    "type": "object",
    "properties": {"toolcall_id": {"type": "string"}, "note": {"type": "string"}},
    "required": ["toolcall_id"],
}


def _text(value: Any) -> str:
    return str(value)


@pytest.fixture
def headers() -> dict[str, str]:
    return {"X-Session-Id": "extract-wires"}


# -- Chat Completions ---------------------------------------------------------------------


def chat_history() -> list[dict[str, Any]]:
    def call(call_id: str) -> dict[str, Any]:
        function = {"name": "read", "arguments": '{"path": "a"}'}
        return {
            "role": "assistant",
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read a."},
        call("call_1"),
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": [{"type": "text", "text": BIG}, {"type": "text", "text": "tail part"}],
        },
        call("call_2"),
        {"role": "tool", "tool_call_id": "call_2", "content": "short"},
    ]


CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def chat_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def chat_run(
    fake: FakeUpstream,
    headers: dict[str, str],
    tools: list[dict[str, Any]],
    stream: bool = False,
    history: list[dict[str, Any]] | None = None,
    **overrides: Any,
) -> Any:
    settings = proxy_settings(fake, store_url="memory://", **{**SETTINGS, **overrides})
    with (
        UvicornThread(create_app(settings)) as px,
        openai.OpenAI(
            base_url=px.url + "/v1", api_key="sk-a", max_retries=0, default_headers=headers
        ) as client,
    ):
        messages = chat_history() if history is None else history
        args: dict[str, Any] = {"model": "gpt-4o", "messages": messages, "tools": tools}
        if not stream:
            return client.chat.completions.create(**args)
        # The stream read into the completion it stands for.
        text, calls = [], []
        for chunk in client.chat.completions.create(**args, stream=True):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                calls += choice.delta.tool_calls or []
        message = SimpleNamespace(content="".join(text), tool_calls=calls or None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def chat_main(fake: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in fake.chat_requests if r.json and not is_summary_request(r.json)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_extract_answer_keeps_the_text_parts(
    chat_fake: FakeUpstream, headers: dict[str, str], stream: bool
) -> None:
    chat_fake.push(
        Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": "call_1"}, id="call_x"),
        Reply.text("done"),
    )
    completion = chat_run(chat_fake, headers, CHAT_TOOLS, stream)
    assert completion.choices[0].message.content == "done"
    assert completion.choices[0].message.tool_calls is None
    first, second = chat_main(chat_fake)
    assert first["messages"][3]["content"] == placeholder_for("call_1")
    answer = second["messages"][-1]
    assert answer["tool_call_id"] == "call_x"
    assert answer["content"] == chat_history()[3]["content"]  # both parts, apart


@pytest.mark.parametrize("compactor", ["seed", "cache-aware"])
def test_chat_client_owning_the_tool_name_gets_no_placeholder_and_its_call(
    chat_fake: FakeUpstream, headers: dict[str, str], compactor: str
) -> None:
    own = {
        "type": "function",
        "function": {"name": EXTRACT_TOOL_NAME, "parameters": OWN_SCHEMA},
    }
    chat_fake.default = lambda body: (
        Reply.text("## overview\nsummary")
        if is_summary_request(body)
        else Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": "call_1", "note": "mine"}, id="c9")
    )
    completion = chat_run(chat_fake, headers, [*CHAT_TOOLS, own], compactor=compactor)
    calls = completion.choices[0].message.tool_calls
    assert [(c.id, c.function.name) for c in calls] == [("c9", EXTRACT_TOOL_NAME)]
    assert '"note": "mine"' in calls[0].function.arguments or '"note":"mine"' in (
        calls[0].function.arguments
    )
    main = chat_main(chat_fake)
    assert len(main) == 1  # the proxy did not answer the call itself
    assert main[0]["tools"] == [*CHAT_TOOLS, own]
    assert PLACEHOLDER not in _text(main[0]["messages"])


# -- Anthropic Messages -------------------------------------------------------------------

TOOL_RESULT = [
    {"type": "text", "text": BIG},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {"type": "text", "text": "after the screenshot"},
]
READ = {"name": "read", "input_schema": {"type": "object", "properties": {}}}


def messages_history() -> list[dict[str, Any]]:
    def use(tool_id: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": tool_id, "name": "read", "input": {}}
        return {"role": "assistant", "content": [block]}

    def result(tool_id: str, content: Any) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
        return {"role": "user", "content": [block]}

    return [
        {"role": "user", "content": "Take a screenshot."},
        use("toolu_1"),
        result("toolu_1", TOOL_RESULT),
        use("toolu_2"),
        result("toolu_2", "short"),
    ]


def messages_run(
    headers: dict[str, str],
    tools: list[dict[str, Any]],
    *turns: Any,
    stream: bool = False,
    history: list[dict[str, Any]] | None = None,
    policy: Any = None,
    **overrides: Any,
) -> Any:
    with FakeMessages() as fake:
        fake.policy = policy or (
            lambda body: (
                MessagesTurn.text("## overview\nsummary")
                if "summar" in _text(body.get("messages", [])[-1:]).lower()
                and not any(t.get("name") == "read" for t in body.get("tools") or [])
                else turns[0]
            )
        )
        fake.push_turns(*turns)
        settings = messages_settings(fake, store_url="memory://", **{**SETTINGS, **overrides})
        with (
            UvicornThread(create_app(settings)) as px,
            anthropic.Anthropic(
                base_url=px.url, api_key="sk-ant-a", max_retries=0, default_headers=headers
            ) as client,
        ):
            args: dict[str, Any] = {
                "model": "claude-opus-4-8",
                "max_tokens": 1000,
                "messages": messages_history() if history is None else history,
                "tools": tools,
            }
            if stream:
                with client.messages.stream(**args) as events:
                    reply = events.get_final_message()
            else:
                reply = client.messages.create(**args)
        main = [
            r.json
            for r in fake.messages_requests
            if r.json and any(t.get("name") == "read" for t in r.json.get("tools") or [])
        ]
    return reply, main


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_extract_answer_is_the_original_blocks(
    headers: dict[str, str], stream: bool
) -> None:
    reply, main = messages_run(
        headers,
        [READ],
        MessagesTurn.tool(EXTRACT_TOOL_NAME, {"toolcall_id": "toolu_1"}, id="toolu_x"),
        MessagesTurn.text("done"),
        stream=stream,
    )
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == "done"
    first, second = main
    assert first["messages"][2]["content"][0]["content"] == [
        {"type": "text", "text": placeholder_for("toolu_1")}
    ] or first["messages"][2]["content"][0]["content"] == placeholder_for("toolu_1")
    answer = second["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "toolu_x"
    assert answer["content"] == TOOL_RESULT  # text, image, text: in place


def test_messages_client_owning_the_tool_name_gets_no_placeholder_and_its_call(
    headers: dict[str, str],
) -> None:
    own = {"name": EXTRACT_TOOL_NAME, "input_schema": OWN_SCHEMA}
    call = MessagesTurn.tool(EXTRACT_TOOL_NAME, {"toolcall_id": "toolu_1"}, id="toolu_9")
    reply, main = messages_run(headers, [READ, own], call)
    uses = [(b.id, b.name) for b in reply.content if b.type == "tool_use"]
    assert uses == [("toolu_9", EXTRACT_TOOL_NAME)]
    assert len(main) == 1
    assert main[0]["tools"] == [READ, own]
    assert PLACEHOLDER not in _text(main[0]["messages"])


# -- Responses ----------------------------------------------------------------------------

FCO_OUTPUT = [
    {"type": "input_text", "text": BIG},
    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
    {"type": "input_text", "text": "after the screenshot"},
]
SHELL_OUTPUT = [
    {"stdout": BIG, "stderr": "a warning\n", "outcome": {"type": "exit", "exit_code": 0}}
]
FUNCTION = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}


def responses_input() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Look at the screen, then run the build."},
        {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": FCO_OUTPUT},
        {
            "type": "shell_call",
            "call_id": "call_2",
            "action": {"commands": ["make"]},
            "status": "completed",
        },
        {"type": "shell_call_output", "call_id": "call_2", "output": SHELL_OUTPUT},
        {"type": "function_call", "call_id": "call_3", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_3", "output": "short"},
    ]


def responses_run(
    headers: dict[str, str],
    tools: list[dict[str, Any]],
    *turns: Any,
    stream: bool = False,
    history: list[dict[str, Any]] | None = None,
    policy: Any = None,
    **overrides: Any,
) -> Any:
    def summary(request: ResponsesRequest) -> ResponsesTurn:
        return ResponsesTurn(text="## overview\nsummary")

    with FakeResponses() as fake:
        fake.policy = policy or summary
        fake.push_turns(*turns)
        settings = proxy_settings(fake, store_url="memory://", **{**SETTINGS, **overrides})
        with (
            UvicornThread(create_app(settings)) as px,
            openai.OpenAI(
                base_url=px.url + "/v1", api_key="sk-a", max_retries=0, default_headers=headers
            ) as client,
        ):
            items = responses_input() if history is None else history
            args: dict[str, Any] = {"model": "gpt-5", "input": items, "tools": tools}
            if stream:
                events = list(client.responses.create(**args, stream=True))
                response = next(e.response for e in events if e.type == "response.completed")
            else:
                response = client.responses.create(**args)
        main = [
            r.json
            for r in fake.responses_requests
            if r.json and any(t.get("name") == "read" for t in r.json.get("tools") or [])
        ]
    return response, main


def outputs(body: dict[str, Any]) -> dict[str, Any]:
    return {
        i["call_id"]: i.get("output")
        for i in body["input"]
        if str(i.get("type", "")).endswith("_output")
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_responses_extract_answers_are_the_original_parts_and_the_shell_output(
    headers: dict[str, str], stream: bool
) -> None:
    calls = [
        (EXTRACT_TOOL_NAME, {"toolcall_id": "call_1"}, "call_x1"),
        (EXTRACT_TOOL_NAME, {"toolcall_id": "call_2"}, "call_x2"),
    ]
    response, main = responses_run(
        headers, [FUNCTION], ResponsesTurn(calls=calls), ResponsesTurn(text="done"), stream=stream
    )
    assert response.output_text == "done"
    assert all(getattr(i, "name", None) != EXTRACT_TOOL_NAME for i in response.output)
    first, second = main
    assert outputs(first)["call_1"] == placeholder_for("call_1")
    assert outputs(first)["call_2"] == SHELL_OUTPUT  # structured: never replaced by text
    answers = outputs(second)
    assert answers["call_x1"] == FCO_OUTPUT  # text, image, text: in place
    shell = answers["call_x2"]
    assert isinstance(shell, str) and BIG.replace("\n", "\\n") in shell
    assert '"stderr":"a warning\\n"' in shell and '"exit_code":0' in shell


def test_responses_client_owning_the_tool_name_gets_no_placeholder_and_its_call(
    headers: dict[str, str],
) -> None:
    own = {"type": "function", "name": EXTRACT_TOOL_NAME, "parameters": OWN_SCHEMA}
    call = ResponsesTurn(calls=[(EXTRACT_TOOL_NAME, {"toolcall_id": "call_1"}, "call_9")])
    response, main = responses_run(headers, [FUNCTION, own], call)
    called = [(i.call_id, i.name) for i in response.output if i.type == "function_call"]
    assert called == [("call_9", EXTRACT_TOOL_NAME)]
    assert len(main) == 1
    assert main[0]["tools"] == [FUNCTION, own]
    assert PLACEHOLDER not in _text(main[0]["input"])
