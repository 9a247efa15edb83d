"""The extract tool's answer on each wire is the original output, whole (issue 26 item 4).

Anthropic `tool_result` content comes back as its blocks (text and images in place),
Responses outputs as their input parts (a shell call's entries and a computer call's
screenshot included), Chat tool messages as text parts with a marker for what text cannot
carry; text parts keep their separation, and no answer is ever an empty string.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from proxy.session.extract_tool import EXTRACT_TOOL_NAME, answer, answer_content
from proxy.session.history import tool_results
from proxy.session.tool_output import EMPTY_OUTPUT, as_text, chat_content
from proxy.wire.base import Round
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.messages.bodies import continue_body as messages_continue
from proxy.wire.messages.to_neutral import to_neutral
from proxy.wire.responses.adapter import ResponsesWire
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import items_to_messages

PNG = base64.b64encode(b"\x89PNG" + bytes(range(256)) * 48).decode()  # 12292 bytes
PNG_BYTES = 4 + 256 * 48


def extract(key: str, call_id: str = "x1") -> dict[str, Any]:
    arguments = orjson.dumps({"toolcall_id": key}).decode()
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": EXTRACT_TOOL_NAME, "arguments": arguments},
    }


def results_for(messages: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """What the pipeline hands the wire: one neutral tool message per extract call."""
    originals = tool_results(messages)[1]
    content = answer_content(extract(key), originals)
    return [{"role": "tool", "tool_call_id": "x1", "content": content}]


# -- Anthropic Messages -------------------------------------------------------------------

MESSAGES_RESULT = [
    {"type": "text", "text": "first part"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {"type": "text", "text": "second part"},
    {"type": "image", "source": {"type": "url", "url": "https://example.com/shot.png"}},
]


def messages_history(content: Any) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}],
        },
    ]


def messages_answer(content: Any) -> Any:
    neutral = to_neutral(None, messages_history(content))
    body = {"model": "m", "max_tokens": 10, "messages": messages_history(content)}
    reply = {
        "content": [
            {"type": "tool_use", "id": "x1", "name": EXTRACT_TOOL_NAME, "input": {}},
        ]
    }
    rnd = Round(message={}, usage=None, only_extract=True, raw=reply)
    sent = messages_continue(body, rnd, results_for(neutral, "toolu_1"))
    block = sent["messages"][-1]["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "x1"
    return block["content"]


def test_messages_answer_is_the_original_blocks_in_place() -> None:
    assert messages_answer(MESSAGES_RESULT) == MESSAGES_RESULT


def test_messages_answer_keeps_file_images_and_documents_without_breakpoints() -> None:
    file_image = {"type": "image", "source": {"type": "file", "file_id": "file_011"}}
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
        "title": "notes.txt",
    }
    mark = {"cache_control": {"type": "ephemeral"}}
    content = [{**file_image, **mark}, {"type": "text", "text": "t", **mark}, {**document, **mark}]
    assert messages_answer(content) == [file_image, {"type": "text", "text": "t"}, document]


def test_messages_answer_of_a_string_and_of_nothing() -> None:
    assert messages_answer("plain output") == "plain output"
    assert messages_answer([]) == EMPTY_OUTPUT


# -- Responses ----------------------------------------------------------------------------

FILE = {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,QUJD"}
FCO_PARTS = [
    {"type": "input_text", "text": "first part"},
    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "high"},
    {"type": "input_text", "text": "second part"},
    FILE,
]
SHELL_OUTPUT = [
    {"stdout": "hello\n", "stderr": "warn\n", "outcome": {"type": "exit", "exit_code": 0}},
]


def responses_answer(call: dict[str, Any], output: dict[str, Any]) -> Any:
    items = [{"role": "user", "content": "go"}, call, output]
    neutral = items_to_messages(items)
    body = {"model": "m", "input": items}
    reply = {
        "output": [
            {"type": "function_call", "call_id": "x1", "name": EXTRACT_TOOL_NAME, "arguments": "{}"}
        ]
    }
    rnd = Round(message={}, usage=None, only_extract=True, raw=reply)
    sent = ResponsesWire().continue_body(body, rnd, results_for(neutral, "c1"))
    last = sent["input"][-1]
    assert last["type"] == "function_call_output" and last["call_id"] == "x1"
    return last["output"]


def function_call(name: str = "f") -> dict[str, Any]:
    return {"type": "function_call", "call_id": "c1", "name": name, "arguments": "{}"}


def test_responses_function_output_parts_come_back_in_place() -> None:
    output = {"type": "function_call_output", "call_id": "c1", "output": FCO_PARTS}
    assert responses_answer(function_call(), output) == FCO_PARTS


def test_responses_shell_call_output_is_extracted_not_empty() -> None:
    call = {
        "type": "shell_call",
        "call_id": "c1",
        "action": {"commands": ["echo hello"]},
        "status": "completed",
    }
    output = {"type": "shell_call_output", "call_id": "c1", "output": SHELL_OUTPUT}
    text = responses_answer(call, output)
    assert isinstance(text, str) and text
    assert '"stdout":"hello\\n"' in text and '"stderr":"warn\\n"' in text
    assert '"exit_code":0' in text


@pytest.mark.parametrize(
    ("screenshot", "part"),
    [
        (
            {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG}"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
        ),
        (
            {"type": "computer_screenshot", "file_id": "file-123"},
            {"type": "input_image", "file_id": "file-123"},
        ),
    ],
)
def test_responses_computer_screenshot_comes_back_as_an_image(
    screenshot: dict[str, Any], part: dict[str, Any]
) -> None:
    call = {"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"}}
    output = {"type": "computer_call_output", "call_id": "c1", "output": screenshot}
    assert responses_answer(call, output) == [part]


def test_responses_local_shell_and_plain_outputs() -> None:
    call = {"type": "local_shell_call", "call_id": "c1", "action": {"type": "exec"}}
    output = {"type": "local_shell_call_output", "call_id": "c1", "output": "ls output"}
    assert responses_answer(call, output) == "ls output"
    output = {"type": "function_call_output", "call_id": "c1", "output": ""}
    assert responses_answer(function_call(), output) == EMPTY_OUTPUT


# -- Chat Completions ---------------------------------------------------------------------


def chat_answer(content: Any) -> Any:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": content},
    ]
    rnd = Round(
        message={"role": "assistant", "content": None, "tool_calls": [extract("c1")]},
        usage=None,
        only_extract=True,
    )
    sent = ChatWire().continue_body({"messages": messages}, rnd, results_for(messages, "c1"))
    assert sent["messages"][-1]["tool_call_id"] == "x1"
    return sent["messages"][-1]["content"]


def test_chat_text_parts_stay_parts() -> None:
    parts = [{"type": "text", "text": "first part"}, {"type": "text", "text": "second part"}]
    assert chat_answer(parts) == parts
    assert chat_answer("plain") == "plain"
    assert chat_answer("") == EMPTY_OUTPUT


def test_chat_marks_what_text_cannot_carry() -> None:
    content = [
        {"type": "text", "text": "before"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        FILE,
        {"type": "text", "text": "after"},
    ]
    assert chat_answer(content) == [
        {"type": "text", "text": "before"},
        {"type": "text", "text": f"[image omitted: image/png, {PNG_BYTES} bytes]"},
        {"type": "text", "text": "[image omitted: https://example.com/a.png]"},
        {"type": "text", "text": "[file omitted: a.pdf, application/pdf, 3 bytes]"},
        {"type": "text", "text": "after"},
    ]


# -- The text form ------------------------------------------------------------------------


def test_the_text_form_keeps_separation_and_is_never_empty() -> None:
    originals = {
        "parts": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "blocks": MESSAGES_RESULT,
        "empty": "",
        "nothing": [],
        "shell": SHELL_OUTPUT,
    }
    assert answer(extract("parts"), originals) == "a\nb"
    assert answer(extract("blocks"), originals) == (
        f"first part\n[image omitted: image/png, {PNG_BYTES} bytes]\nsecond part\n"
        "[image omitted: https://example.com/shot.png]"
    )
    assert answer(extract("empty"), originals) == EMPTY_OUTPUT
    assert answer(extract("nothing"), originals) == EMPTY_OUTPUT
    assert "hello" in answer(extract("shell"), originals)
    for key in originals:
        assert answer(extract(key), originals)
        assert as_text(originals[key])
        assert chat_content(originals[key])


def test_responses_a_replayed_hidden_answer_keeps_its_parts() -> None:
    """A hidden extract answer (no original items) goes back into later requests as it was
    given: the client's parts in place, not their joined text."""
    hidden = {"role": "tool", "tool_call_id": "x1", "content": FCO_PARTS}
    assert messages_to_items([hidden]) == [
        {"type": "function_call_output", "call_id": "x1", "output": FCO_PARTS}
    ]
    shell = {"role": "tool", "tool_call_id": "x2", "content": SHELL_OUTPUT}
    (item,) = messages_to_items([shell])
    assert isinstance(item["output"], str) and '"stdout":"hello\\n"' in item["output"]
