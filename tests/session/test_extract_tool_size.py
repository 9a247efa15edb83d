"""The extract tool is sent with every request that carries it (by default every request of a
session with tools), so its definition is kept to at most 60 tokens (tiktoken's o200k_base)
over the exact JSON each wire puts upstream; and the summary's last line, which points the
model at its search, to at most 30."""

from __future__ import annotations

import warnings
from typing import Any

import orjson
import pytest

from proxy.rules import format_compacted_summary
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, TOOL_DEFINITION, inject
from proxy.wire.messages.bodies import inject_tool as messages_inject
from proxy.wire.responses.tool import inject_tool as responses_inject
from tests.bench.tokens import load_encoder

MAX_TOKENS = 60
MAX_SUMMARY_LINE_TOKENS = 30
CLIENT_TOOL = {"type": "function", "function": {"name": "read_file", "parameters": {}}}


@pytest.fixture(scope="module")
def count() -> Any:
    with warnings.catch_warnings():  # bpe_openai, which ships the vocabulary, imports with one
        warnings.simplefilter("ignore", DeprecationWarning)
        counter, source = load_encoder()
    assert source.startswith("tiktoken o200k_base"), source  # never the chars/4 fallback
    return counter


@pytest.mark.parametrize(
    "wire, inject_fn",
    [("chat", inject), ("responses", responses_inject), ("messages", messages_inject)],
)
def test_the_definition_each_wire_sends_is_at_most_60_tokens(
    count: Any, wire: str, inject_fn: Any
) -> None:
    sent = inject_fn([CLIENT_TOOL])
    ours = sent[-1]
    # What a request pays for the tool: the tools list with it against the list without it.
    added = count(orjson.dumps(sent).decode()) - count(orjson.dumps(sent[:-1]).decode())
    alone = count(orjson.dumps(ours).decode())
    assert alone <= MAX_TOKENS, (wire, alone, ours)
    assert added <= MAX_TOKENS + 1, (wire, added)  # the comma between two tools at most
    assert "extract_compacted_tool_result" in orjson.dumps(ours).decode()


def test_the_definition_names_its_parameters_and_says_when_to_call_it() -> None:
    fn = TOOL_DEFINITION["function"]
    assert list(fn["parameters"]["properties"]) == ["toolcall_id", "offset", "query"]
    assert fn["parameters"]["type"] == "object"
    description = fn["description"].lower()
    assert "compacted id" in description and "search" in description


def test_the_summarys_last_line_points_at_the_search_in_at_most_30_tokens(count: Any) -> None:
    rendered = format_compacted_summary("## overview\nwork so far")
    last = rendered.splitlines()[-1]
    assert EXTRACT_TOOL_NAME in last and "query" in last
    assert count(last) <= MAX_SUMMARY_LINE_TOKENS, (count(last), last)
    assert rendered.splitlines()[-2] == "</conversation_summary>"  # after the data fence
