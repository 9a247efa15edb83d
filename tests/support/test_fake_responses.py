"""The scripted Responses API fake, driven by the official SDK to show it is faithful.

The Codex and SDK tests trust it to answer as api.openai.com does: the SDK parses its
objects and events into its own types, and its refusals use OpenAI's words and shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.compact import SUMMARY_PROMPT, placeholder_for
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.fake_responses import (
    PLACEHOLDER_RE,
    FakeResponses,
    ReadFiles,
    ResponsesRequest,
    Turn,
    count_input_tokens,
    input_items,
    sequence_problems,
)

INCLUDE = ["reasoning.encrypted_content"]
TOOL = {"type": "function", "name": "read_file", "parameters": {"type": "object"}}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeResponses]:
    with FakeResponses() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeResponses) -> FakeResponses:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeResponses) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client:
        yield client


def test_a_whole_response_with_reasoning_text_and_a_call(
    fake: FakeResponses, client: openai.OpenAI
) -> None:
    fake.push_turns(Turn(text="Reading.", reasoning="Think.", calls=[("read_file", {"p": 1})]))
    response = client.responses.create(model="gpt-4.1", input="hi", include=INCLUDE, store=False)
    assert response.object == "response" and response.status == "completed"
    reasoning, message, call = response.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "Think."
    assert reasoning.encrypted_content == fake.issued[reasoning.id]
    assert message.type == "message" and response.output_text == "Reading."
    assert call.type == "function_call" and json.loads(call.arguments) == {"p": 1}
    usage = response.usage
    assert usage is not None
    assert usage.input_tokens == count_input_tokens({"input": "hi"})
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens_details.reasoning_tokens == 64


def test_encrypted_content_only_when_included(fake: FakeResponses, client: openai.OpenAI) -> None:
    fake.push_turns(Turn(text="x", reasoning="r"))
    response = client.responses.create(model="gpt-4.1", input="hi")
    assert response.output[0].encrypted_content is None


def test_the_stream_as_openai_sends_it(fake: FakeResponses) -> None:
    fake.push_turns(Turn(text="Hello there.", reasoning="Plan.", calls=[("read_file", {})]))
    body = {"model": "m", "input": "x", "stream": True, "include": INCLUDE}
    with httpx.stream("POST", fake.url + "/responses", json=body) as response:
        raw = response.read().decode()
    blocks = [b for b in raw.split("\n\n") if b]
    names = [b.split("\n")[0].removeprefix("event: ") for b in blocks]
    data = [json.loads(b.split("\n")[1].removeprefix("data: ")) for b in blocks]
    assert [d["type"] for d in data] == names
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-1] == "response.completed"
    for kind in (
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ):
        assert kind in names
    assert names.count("response.output_item.done") == 3
    final = data[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][0]["encrypted_content"] == fake.issued[final["output"][0]["id"]]
    assert data[0]["response"]["status"] == "in_progress" and data[0]["response"]["usage"] is None


def test_the_sdk_accumulates_the_stream(fake: FakeResponses, client: openai.OpenAI) -> None:
    fake.push_turns(Turn(text="streamed words here", reasoning="why"))
    with client.responses.stream(model="gpt-4.1", input="hi", include=INCLUDE) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 1 and "".join(deltas) == final.output_text == "streamed words here"


def test_usage_grows_with_the_input_and_the_prompt_cache_counts(
    fake: FakeResponses, client: openai.OpenAI
) -> None:
    items: list[Any] = [{"role": "user", "content": "x" * 8000}]
    first = client.responses.create(model="gpt-4.1", input=items)
    items += [{"role": "user", "content": "y" * 400}]
    second = client.responses.create(model="gpt-4.1", input=items)
    assert first.usage and second.usage
    assert second.usage.input_tokens == first.usage.input_tokens + 4 + 100
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached % 128 == 0 and 1024 <= cached <= first.usage.input_tokens


def _error(fake: FakeResponses, body: dict[str, Any]) -> tuple[int, Any]:
    response = httpx.post(fake.url + "/responses", json=body)
    return response.status_code, response.json()


def test_context_length_exceeded(fake: FakeResponses) -> None:
    fake.context_window = 100
    status, body = _error(fake, {"model": "m", "input": "x" * 1000})
    assert status == 400
    assert body == {
        "error": {
            "message": "Your input exceeds the context window of this model. Please adjust "
            "your input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }


CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "done"}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([OUTPUT], "No tool call found for function call output with call_id call_1."),
        ([CALL], "No tool output found for function call call_1."),
        (
            [{"type": "reasoning", "id": "rs_1", "summary": []}, {"role": "user", "content": "x"}],
            "Item 'rs_1' of type 'reasoning' was provided without its required following item.",
        ),
    ],
)
def test_invalid_item_sequences_are_refused(
    fake: FakeResponses, items: list[Any], message: str
) -> None:
    assert sequence_problems(items) == [message]
    status, body = _error(fake, {"model": "m", "input": items})
    assert (status, body["error"]["message"], body["error"]["param"]) == (400, message, "input")


def test_valid_sequence() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    assert sequence_problems([{"role": "user", "content": "x"}, reasoning, CALL, OUTPUT]) == []


def test_encrypted_content_must_come_back_unchanged(
    fake: FakeResponses, client: openai.OpenAI
) -> None:
    fake.push_turns(Turn(text="a", reasoning="r"))
    out = client.responses.create(model="m", input="hi", include=INCLUDE, store=False).output
    items = [{"role": "user", "content": "hi"}, *(i.model_dump(exclude_none=True) for i in out)]
    assert client.responses.create(model="m", input=items, store=False).status == "completed"
    items[1]["encrypted_content"] = items[1]["encrypted_content"][:-4] + "AAAA"
    status, body = _error(fake, {"model": "m", "input": items, "store": False})
    assert (status, body["error"]["code"]) == (400, "invalid_encrypted_content")
    del items[1]["encrypted_content"]
    status, body = _error(fake, {"model": "m", "input": items, "store": False})
    assert status == 404 and "Items are not persisted" in body["error"]["message"]


def test_previous_response_id_continues_a_stored_response(
    fake: FakeResponses, client: openai.OpenAI
) -> None:
    first = client.responses.create(model="m", input="x" * 400)
    second = client.responses.create(model="m", input="more", previous_response_id=first.id)
    assert second.usage and first.usage
    assert second.usage.input_tokens > first.usage.input_tokens
    status, body = _error(fake, {"model": "m", "input": "x", "previous_response_id": "resp_no"})
    assert (status, body["error"]["code"]) == (404, "previous_response_not_found")


def test_refusals_and_failures_can_be_scripted(fake: FakeResponses) -> None:
    fake.push_turns(Turn.refuse(429, "Rate limit reached.", "tokens", None, "rate_limit_exceeded"))
    status, body = _error(fake, {"model": "m", "input": "x"})
    assert (status, body["error"]["code"]) == (429, "rate_limit_exceeded")
    fake.push_turns(Turn(failed=True, error={"code": "server_error", "message": "boom"}))
    with httpx.stream(
        "POST", fake.url + "/responses", json={"model": "m", "input": "x", "stream": True}
    ) as response:
        raw = response.read().decode()
    assert raw.count("event: ") == 3 and "event: response.failed" in raw


def _request(items: list[dict[str, Any]], tools: list[Any]) -> ResponsesRequest:
    body = {"model": "m", "input": items, "tools": tools}
    return ResponsesRequest(body, input_items(body), {})


def test_read_files_model() -> None:
    model = ReadFiles(2, tool="read_file")
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    turn = model(_request(items, [TOOL]))
    assert turn.calls[0][:2] == ("read_file", {"path": "file_1.txt"})
    call = {"type": "function_call", "call_id": "c1", "name": "read_file"}
    items += [call | {"arguments": '{"path":"file_1.txt"}'}]
    items += [{"type": "function_call_output", "call_id": "c1", "output": "text"}]
    assert model(_request(items, [TOOL])).calls[0][1] == {"path": "file_2.txt"}
    # A placeholder and the extract tool: the model asks for the original, once.
    items[-1]["output"] = placeholder_for("c1")
    assert PLACEHOLDER_RE.fullmatch(items[-1]["output"])
    extract = {"type": "function", "name": EXTRACT_TOOL_NAME}
    turn = model(_request(items, [TOOL, extract]))
    assert turn.calls[0][:2] == (EXTRACT_TOOL_NAME, {"toolcall_id": "c1"})
    assert model.extract_call_ids == [turn.calls[0][2]]
    assert model(_request(items, [TOOL, extract])).calls[0][0] == "read_file"
    items += [call | {"call_id": "c2", "arguments": '{"path":"file_2.txt"}'}]
    items += [{"type": "function_call_output", "call_id": "c2", "output": "text"}]
    assert model(_request(items, [TOOL])).text == "Done: read 2 files."
    summary = [{"role": "user", "content": "...\n" + SUMMARY_PROMPT}]
    assert model(_request(summary, [])).text is not None and model.summaries == 1
