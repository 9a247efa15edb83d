"""The extract tool is sent with every request that carries it, so its definition is kept to
at most 40 tokens (tiktoken's o200k_base) over the exact JSON each wire puts upstream."""

from __future__ import annotations

import warnings
from typing import Any

import orjson
import pytest

from proxy.session.extract_tool import TOOL_DEFINITION, inject
from proxy.wire.messages.bodies import inject_tool as messages_inject
from proxy.wire.responses.tool import inject_tool as responses_inject
from tests.bench.tokens import load_encoder

MAX_TOKENS = 40
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
def test_the_definition_each_wire_sends_is_at_most_40_tokens(
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


def test_the_definition_still_names_its_parameter_and_says_what_comes_back() -> None:
    fn = TOOL_DEFINITION["function"]
    assert fn["parameters"]["properties"] == {"toolcall_id": {"type": "string"}}
    assert fn["parameters"]["type"] == "object"
    assert "original" in fn["description"].lower()
