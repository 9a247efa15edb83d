"""The injected tool: definition, injection and answering, including hostile input."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.session.extract_tool import (
    EXTRACT_TOOL_NAME,
    TOOL_DEFINITION,
    answer,
    call_kind,
    client_defines_tool,
    inject,
    split_calls,
)


def call(arguments: Any) -> dict[str, Any]:
    return {
        "id": "c",
        "type": "function",
        "function": {"name": EXTRACT_TOOL_NAME, "arguments": arguments},
    }


ORIGINALS = {"call_1": "original text", "call_1#2": [{"type": "text", "text": "second"}]}


def test_definition_reads_by_id_with_an_offset_or_searches() -> None:
    params = TOOL_DEFINITION["function"]["parameters"]
    assert params["properties"] == {
        "toolcall_id": {"type": "string"},
        "offset": {"type": "integer"},
        "query": {"type": "string"},
    }


def test_inject_appends_last_and_keeps_client_tools() -> None:
    tools = [{"type": "function", "function": {"name": "a"}}]
    assert inject(tools) == [*tools, TOOL_DEFINITION]
    assert inject(None) == [TOOL_DEFINITION]
    assert tools == [{"type": "function", "function": {"name": "a"}}]
    assert client_defines_tool([TOOL_DEFINITION]) and not client_defines_tool(tools)


def test_split_calls() -> None:
    own = {"id": "o", "function": {"name": "read"}}
    ext = call('{"toolcall_id":"call_1"}')
    assert split_calls([own, ext]) == ([own], [ext])
    assert split_calls(None) == ([], [])


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"toolcall_id": "call_1"}', "original text"),
        ('{"toolcall_id": "call_1#2"}', "second"),
        ({"toolcall_id": "call_1"}, "original text"),
    ],
)
def test_answers_by_key(arguments: Any, expected: str) -> None:
    assert answer(call(arguments), ORIGINALS) == expected


@pytest.mark.parametrize(
    "arguments",
    [
        '{"toolcall_id": "call_1", "query": "", "offset": 0}',
        '{"toolcall_id": "call_1", "query": "", "offset": null}',
    ],
)
def test_a_parameter_sent_empty_counts_as_not_given(arguments: str) -> None:
    """A schema the API made strict has the model fill every parameter."""
    assert answer(call(arguments), ORIGINALS) == "original text"
    assert answer(call('{"toolcall_id": "", "query": "x", "offset": 0}'), ORIGINALS).startswith(
        "No match for 'x'"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        '{"toolcall_id": "nope"}',
        '{"toolcall_id": "../../etc/passwd"}',
        '{"toolcall_id": "' + "A" * 10000 + '"}',
        '{"toolcall_id": "\\u0000\\n\\u001b[31m"}',
        '{"toolcall_id": 5}',
        "not json",
        "[]",
        None,
        "{}",  # neither a toolcall_id nor a query
        '{"toolcall_id": "call_1", "query": "text"}',  # both
        '{"query": ""}',
        '{"query": 7}',
        '{"query": "' + "q" * 600 + '"}',
        '{"toolcall_id": "call_1", "offset": -1}',
        '{"toolcall_id": "call_1", "offset": "20"}',
        '{"toolcall_id": "call_1", "offset": 99}',  # past the end
    ],
)
def test_unknown_or_hostile_ids_get_a_bounded_error(arguments: Any) -> None:
    text = answer(call(arguments), ORIGINALS)
    assert text.startswith("[Error]")
    assert len(text) < 400
    assert all(ch.isprintable() for ch in text)


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ('{"toolcall_id": "call_1"}', "read"),
        ('{"toolcall_id": "call_1", "offset": 20000}', "read"),
        ('{"query": "needle"}', "search"),
        ('{"toolcall_id": "", "query": "needle"}', "search"),
        ('{"toolcall_id": "call_1", "query": "needle"}', "invalid"),
        ("{}", "invalid"),
        ("not json", "invalid"),
    ],
)
def test_call_kind_says_what_a_call_asks(arguments: str, kind: str) -> None:
    assert call_kind(call(arguments)) == kind
