"""Responses input items <-> neutral messages: every item kind, refusals, the way back,
the core's own compaction applied in between, and round-trip properties."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.compact import placeholder_for
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, TOOL_DEFINITION, is_extract_call
from proxy.session.fingerprint import PrefixChain
from proxy.session.history import UnrecognisedHistory, validate
from proxy.session.rebuild import rebuild
from proxy.session.state import HiddenExtract, SessionState
from proxy.wire.responses import bodies as responses_requests
from proxy.wire.responses import from_neutral as responses_back
from proxy.wire.responses import reply as responses_rounds
from proxy.wire.responses import stream as responses_stream
from proxy.wire.responses import to_neutral as responses_items
from proxy.wire.responses import tool as responses_tool
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import (
    X_ITEMS,
    items_to_messages,
    output_to_message,
)
from proxy.wire.responses.tool import (
    EXTRACT_TOOL,
    client_defines_tool,
    inject_tool,
    is_extract_item,
)
from tests.core.test_purity import FORBIDDEN, imported_roots


def bare(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without their original items, as the core reads them."""
    return [{k: v for k, v in m.items() if k != X_ITEMS} for m in messages]


def fc(call_id: str, name: str = "exec", arguments: str = '{"cmd":"ls"}') -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def fco(call_id: str, output: Any = "out") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def tc(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


USER = {"role": "user", "content": "hi"}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "plan"}],
    "encrypted_content": "gAAAAB\u00e9==",
}
SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}
SHELL_ACTION = {"type": "exec", "command": ["ls"], "env": {}}
MSG = {
    "type": "message",
    "role": "assistant",
    "id": "msg_1",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}

CASES: list[tuple[str, Any, list[dict[str, Any]]]] = [
    ("plain string input", "hello", [{"role": "user", "content": "hello"}]),
    ("easy user message", [USER], [{"role": "user", "content": "hi"}]),
    (
        "typed user message with parts",
        [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "http://x/i.png", "detail": "low"},
                    {"type": "input_file", "file_id": "file_1"},
                ],
            }
        ],
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "http://x/i.png", "detail": "low"}},
                    {"type": "input_file", "file_id": "file_1"},
                ],
            }
        ],
    ),
    (
        "leading developer and system items become system; a later one keeps its role",
        [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "a"}],
            },
            {"role": "system", "content": "b"},
            USER,
            {"role": "developer", "content": "c"},
        ],
        [
            {"role": "system", "content": "a"},
            {"role": "system", "content": "b"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "c"},
        ],
    ),
    (
        "reasoning, a function call and its output",
        [USER, REASONING, fc("c1"), fco("c1", "a b c"), MSG],
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "plan",
                "tool_calls": [tc("c1", "exec", '{"cmd":"ls"}')],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a b c"},
            {"role": "assistant", "content": "done"},
        ],
    ),
    (
        "custom tool call: its input is the arguments",
        [
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** P"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"},
        ],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("c1", "apply_patch", "*** P")],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    ),
    (
        "local shell call: the action as JSON; the older output names the call under id",
        [
            {"type": "local_shell_call", "id": "ls_1", "call_id": "c1", "action": SHELL_ACTION},
            {"type": "local_shell_call_output", "id": "c1", "output": "file"},
        ],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("c1", "local_shell_call", orjson.dumps(SHELL_ACTION).decode())],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "file"},
        ],
    ),
    (
        "local shell output naming its call under call_id",
        [
            {"type": "local_shell_call", "id": "ls_1", "call_id": "c1", "action": SHELL_ACTION},
            {"type": "local_shell_call_output", "id": "x", "call_id": "c1", "output": "f"},
        ],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("c1", "local_shell_call", orjson.dumps(SHELL_ACTION).decode())],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "f"},
        ],
    ),
    (
        "server-side searches and an MCP call carry no call: text only",
        [
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed"},
            {"type": "mcp_call", "id": "mcp_1", "name": "t", "arguments": "{}", "output": "x"},
            MSG,
        ],
        [{"role": "assistant", "content": "done"}],
    ),
    (
        "computer call: the screenshot output counts as an image",
        [
            {"type": "computer_call", "id": "cu_1", "call_id": "c1", "action": {"type": "click"}},
            {"type": "computer_call_output", "call_id": "c1", "output": SCREENSHOT},
        ],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("c1", "computer_call", '{"type":"click"}')],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "input_image", "image_url": SCREENSHOT["image_url"]}],
            },
        ],
    ),
    (
        "item references, typed or not, join the model's items",
        [USER, {"type": "item_reference", "id": "msg_0"}, {"id": "rs_0"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
    ),
    (
        "unknown items: a call with an output, and one joining the group",
        [
            {"type": "future_call", "call_id": "c1", "blob": [1]},
            {"type": "future_thing", "id": "x"},
            {"type": "future_call_output", "call_id": "c1", "output": {"k": 1}},
        ],
        [
            {"role": "assistant", "content": None, "tool_calls": [tc("c1", "future_call", "")]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"k":1}'},
        ],
    ),
    (
        "list outputs stay parts; parallel calls answered out of order",
        [fc("a"), fc("b"), fco("b", [{"type": "input_text", "text": "B"}]), fco("a", "A")],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("a", "exec", '{"cmd":"ls"}'), tc("b", "exec", '{"cmd":"ls"}')],
            },
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "input_text", "text": "B"}]},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
        ],
    ),
    (
        "refusal parts are text; reasoning without a summary counts nothing",
        [
            {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "e"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "assistant", "content": "more"},
        ],
        [{"role": "assistant", "content": "no\nmore"}],
    ),
    (
        "a program's output names its call and holds a result",
        [
            {"type": "program", "id": "p", "call_id": "c1", "code": "x()", "fingerprint": "f"},
            {"type": "program_output", "id": "po", "call_id": "c1", "result": "7"},
        ],
        [
            {"role": "assistant", "content": None, "tool_calls": [tc("c1", "program", "x()")]},
            {"role": "tool", "tool_call_id": "c1", "content": "7"},
        ],
    ),
]


@pytest.mark.parametrize(("items", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_items_to_messages(items: Any, expected: list[dict[str, Any]]) -> None:
    snapshot = copy.deepcopy(items)
    messages = items_to_messages(items)
    assert bare(messages) == expected
    assert validate(messages) is messages
    assert items == snapshot  # nothing edited
    if isinstance(items, list):
        originals = [o for m in messages for o in m[X_ITEMS]]
        assert len(originals) == len(items)
        assert all(a is b for a, b in zip(originals, items, strict=True))
        back = messages_to_items(messages)
        assert all(a is b for a, b in zip(back, items, strict=True))
        assert orjson.dumps(back) == orjson.dumps(items)
    else:
        assert messages_to_items(messages) == [{"role": "user", "content": items}]


REFUSED: list[tuple[str, Any]] = [
    ("input is an object", {"role": "user", "content": "x"}),
    ("input is null", None),
    ("input is a number", 3),
    ("an item is a string", ["hi"]),
    ("an item is a list", [[USER]]),
    ("a message with an unknown role", [{"role": "tool", "content": "x"}]),
    ("a typed message without a role", [{"type": "message", "content": "x"}]),
    ("an item without type, role or id", [{"content": "x"}]),
    ("a type that is not a string", [{"type": 7}]),
    ("a message without content", [{"role": "user"}]),
    ("an assistant message with null content", [{"role": "assistant", "content": None}]),
    ("an output without any call", [USER, fco("c1")]),
    ("an output for a call before a user turn", [fc("c1"), USER, fco("c1")]),
    ("an output for another call", [fc("c1"), fco("c2")]),
    ("a function output without call_id", [fc("c1"), {"type": "function_call_output"}]),
    ("a call_id that is a number", [{"type": "function_call", "call_id": 5, "name": "f"}]),
    ("a computer output without its call", [{"type": "computer_call_output", "call_id": "x"}]),
    ("an unknown output for no call", [{"type": "thing_output", "call_id": "x"}]),
]


@pytest.mark.parametrize("items", [c[1] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_histories_the_core_cannot_reason_about_are_refused(items: Any) -> None:
    with pytest.raises(UnrecognisedHistory):
        items_to_messages(items)


def test_an_unknown_output_item_without_a_call_id_joins_the_model_items() -> None:
    items = [fc("c1"), fco("c1"), {"type": "tool_search_output", "tools": []}]
    messages = items_to_messages(items)
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages_to_items(messages) == items


# -- the way back with changes ---------------------------------------------------------------


def replaced(items: list[Any], index: int, content: Any) -> list[Any]:
    """items -> messages, the tool message of item `index` given new content -> items."""
    messages = items_to_messages(items)
    for m in messages:
        if m["role"] == "tool" and m[X_ITEMS][0] is items[index]:
            m["content"] = content
    return messages_to_items(messages)


OUTPUT_EDITS: list[tuple[str, dict[str, Any], dict[str, Any], Any]] = [
    ("function output", fc("c1"), fco("c1", "long"), "output"),
    ("function output given as parts", fc("c1"), fco("c1", [{"type": "input_text"}]), "output"),
    (
        "custom tool output",
        {"type": "custom_tool_call", "call_id": "c1", "name": "p", "input": ""},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "long", "id": "x"},
        "output",
    ),
    (
        "local shell output",
        {"type": "local_shell_call", "id": "l", "call_id": "c1", "action": SHELL_ACTION},
        {"type": "local_shell_call_output", "id": "c1", "output": "long", "status": "completed"},
        "output",
    ),
    (
        "an unknown output holding text",
        {"type": "x_call", "call_id": "c1"},
        {"type": "x_call_output", "call_id": "c1", "output": "long"},
        "output",
    ),
    (
        "a program output holds its text under result",
        {"type": "program", "call_id": "c1", "code": ""},
        {"type": "program_output", "call_id": "c1", "result": "long", "status": "completed"},
        "result",
    ),
    (
        "a computer screenshot is never replaced",
        {"type": "computer_call", "call_id": "c1", "action": {}},
        {"type": "computer_call_output", "call_id": "c1", "output": SCREENSHOT},
        None,
    ),
    (
        "a shell output (structured) is never replaced",
        {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}},
        {
            "type": "shell_call_output",
            "call_id": "c1",
            "output": [{"stdout": "x", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
        None,
    ),
]


@pytest.mark.parametrize(
    ("call", "output", "field"), [c[1:] for c in OUTPUT_EDITS], ids=[c[0] for c in OUTPUT_EDITS]
)
def test_a_changed_tool_result_replaces_only_the_output(
    call: dict[str, Any], output: dict[str, Any], field: str | None
) -> None:
    snapshot = copy.deepcopy(output)
    placeholder = placeholder_for("c1")
    back = replaced([USER, call, output], 2, placeholder)
    assert back[:2] == [USER, call] and back[1] is call
    assert output == snapshot  # the client's item is never edited
    if field is None:
        assert back[2] is output
    else:
        assert back[2] == {**output, field: placeholder}
        assert list(back[2]) == list(output)  # same keys, same order


def test_the_proxys_own_calls_and_answers_become_new_items() -> None:
    items = [USER, REASONING, fc("c1"), fco("c1")]
    messages = items_to_messages(items)
    extract = tc("x1", EXTRACT_TOOL_NAME, '{"toolcall_id":"c0"}')
    messages[1] = {**messages[1], "tool_calls": [*messages[1]["tool_calls"], extract]}
    messages.insert(2, {"role": "tool", "tool_call_id": "x1", "content": "the original"})
    assert messages_to_items(messages) == [
        USER,
        REASONING,
        fc("c1"),
        {
            "type": "function_call",
            "call_id": "x1",
            "name": EXTRACT_TOOL_NAME,
            "arguments": '{"toolcall_id":"c0"}',
        },
        {"type": "function_call_output", "call_id": "x1", "output": "the original"},
        fco("c1"),
    ]


def test_a_hidden_call_carrying_its_items_emits_them() -> None:
    hidden = [{**REASONING, "id": "rs_9"}, fc("x1", EXTRACT_TOOL_NAME, "{}")]
    call = {**tc("x1", EXTRACT_TOOL_NAME, "{}"), X_ITEMS: hidden}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call], X_ITEMS: [MSG]}]
    assert messages_to_items(messages) == [MSG, *hidden]


def test_messages_the_proxy_made_become_message_items() -> None:
    messages = [
        {"role": "system", "content": "summary"},
        {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "x"}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
        {"role": "assistant", "content": "ok", "tool_calls": [tc("c", "f", "{}")]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "d", "function": {"name": "g"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "r"}]},
    ]
    assert messages_to_items(messages) == [
        {
            "type": "message",
            "role": "system",
            "content": [{"type": "input_text", "text": "summary"}],
        },
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "a"}, {"type": "x"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_image", "image_url": "u", "detail": "auto"}],
        },
        {"type": "message", "role": "assistant", "content": "ok"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "d", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "r"},
    ]


def test_a_message_of_unknown_role_without_originals_is_an_error() -> None:
    with pytest.raises(ValueError, match="role 'function'"):
        messages_to_items([{"role": "function", "content": "x"}])


def test_output_to_message() -> None:
    output = [REASONING, MSG, fc("c1"), fc("x", EXTRACT_TOOL_NAME, '{"toolcall_id":"a"}')]
    message = output_to_message(output)
    assert bare([message]) == [
        {
            "role": "assistant",
            "content": "done",
            "reasoning_content": "plan",
            "tool_calls": [
                tc("c1", "exec", '{"cmd":"ls"}'),
                tc("x", EXTRACT_TOOL_NAME, '{"toolcall_id":"a"}'),
            ],
        }
    ]
    assert message[X_ITEMS] == output
    assert messages_to_items([message]) == output
    with pytest.raises(UnrecognisedHistory):
        output_to_message({"output": []})
    with pytest.raises(UnrecognisedHistory):
        output_to_message([None])


# -- the core's own rebuild in between ---------------------------------------------------------


def test_rebuild_reclaims_old_outputs_and_reinserts_hidden_calls() -> None:
    items = [
        {"role": "developer", "content": "rules"},
        USER,
        REASONING,
        fc("c1"),
        fco("c1", "x" * 500),
        {**REASONING, "id": "rs_2"},
        fc("c2"),
        fco("c2", "y" * 500),
        MSG,
    ]
    messages = items_to_messages(items)
    extract = tc("x1", EXTRACT_TOOL_NAME, '{"toolcall_id":"c1"}')
    answer = {"role": "tool", "tool_call_id": "x1", "content": "x" * 500}
    # Recorded against this very history: the messages before its anchor hash as they did.
    before = PrefixChain(messages).prefix(4)
    hidden = HiddenExtract(4, ["c2"], [extract], [answer], before=before)
    state = SessionState(reclaimed=["c1"], hidden=[hidden])
    upstream = rebuild(messages, state).upstream_messages()
    assert messages_to_items(upstream) == [
        *items[:4],
        {**items[4], "output": placeholder_for("c1")},
        *items[5:7],
        {
            "type": "function_call",
            "call_id": "x1",
            "name": EXTRACT_TOOL_NAME,
            "arguments": '{"toolcall_id":"c1"}',
        },
        {"type": "function_call_output", "call_id": "x1", "output": "x" * 500},
        *items[7:],
    ]


# -- the extract tool ------------------------------------------------------------------------


def test_extract_tool_in_the_responses_shape() -> None:
    fn = TOOL_DEFINITION["function"]
    assert EXTRACT_TOOL["type"] == "function"
    assert EXTRACT_TOOL["name"] == EXTRACT_TOOL_NAME
    assert EXTRACT_TOOL["description"] == fn["description"]
    params = EXTRACT_TOOL["parameters"]
    assert params["properties"] == fn["parameters"]["properties"]
    assert params["properties"]["toolcall_id"]["type"] == "string"
    # `strict: false`: OpenAI would make the schema strict itself, every parameter required
    assert EXTRACT_TOOL["strict"] is False and params is not fn["parameters"]
    assert "function" not in EXTRACT_TOOL


CLIENT_TOOLS: list[Any] = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
    {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
    {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
    {"type": "web_search", "search_context_size": "low"},
    {"type": "file_search", "vector_store_ids": ["vs"]},
    {"type": "mcp", "server_label": "s", "server_url": "https://mcp"},
    {"type": "local_shell"},
]


def test_inject_keeps_every_client_tool_unchanged_and_appends_ours() -> None:
    snapshot = copy.deepcopy(CLIENT_TOOLS)
    tools = inject_tool(CLIENT_TOOLS)
    assert tools[:-1] == snapshot and all(
        a is b for a, b in zip(tools[:-1], CLIENT_TOOLS, strict=True)
    )
    assert tools[-1] == EXTRACT_TOOL
    assert CLIENT_TOOLS == snapshot
    assert inject_tool(None) == [EXTRACT_TOOL]


@pytest.mark.parametrize(
    ("tools", "defined"),
    [
        (CLIENT_TOOLS, False),
        (None, False),
        ("tools", False),
        ([*CLIENT_TOOLS, {"type": "function", "name": EXTRACT_TOOL_NAME}], True),
        ([{"type": "custom", "name": EXTRACT_TOOL_NAME}], True),
        ([{"type": "function", "function": {"name": EXTRACT_TOOL_NAME}}], True),
        ([None, 3, {"type": "function", "name": "other"}], False),
    ],
)
def test_client_defines_tool(tools: Any, defined: bool) -> None:
    assert client_defines_tool(tools) is defined


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (fc("x", EXTRACT_TOOL_NAME), True),
        (fc("x", "exec"), False),
        ({"type": "custom_tool_call", "name": EXTRACT_TOOL_NAME}, False),
        (None, False),
    ],
)
def test_is_extract_item(item: Any, expected: bool) -> None:
    assert is_extract_item(item) is expected


# -- properties ------------------------------------------------------------------------------

texts = st.text(max_size=12)
MODEL_KINDS = [
    *("reasoning", "message", "function_call", "custom_tool_call", "local_shell_call"),
    *("computer_call", "web_search_call", "mcp_call", "future_call", "future_thing"),
]


def _parts(draw: st.DrawFn, kind: str) -> Any:
    if draw(st.booleans()):
        return draw(texts)
    return [{"type": kind, "text": t} for t in draw(st.lists(texts, max_size=2))]


def _client_message(draw: st.DrawFn, role: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": _parts(draw, "input_text")}
    return {"type": "message", **message} if draw(st.booleans()) else message


def _model_item(draw: st.DrawFn, k: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(MODEL_KINDS))
    call = f"call_{k}"
    if kind == "reasoning":
        summary = [{"type": "summary_text", "text": t} for t in draw(st.lists(texts, max_size=2))]
        return {"type": kind, "id": f"rs_{k}", "summary": summary, "encrypted_content": draw(texts)}
    if kind == "message":
        return {
            "type": kind,
            "role": "assistant",
            "id": f"m_{k}",
            "content": _parts(draw, "output_text"),
        }
    if kind == "function_call":
        return {
            "type": kind,
            "id": f"fc_{k}",
            "call_id": call,
            "name": "f",
            "arguments": draw(texts),
        }
    if kind == "custom_tool_call":
        return {"type": kind, "call_id": call, "name": "patch", "input": draw(texts)}
    if kind == "local_shell_call":
        return {"type": kind, "id": f"l_{k}", "call_id": call, "action": SHELL_ACTION}
    if kind == "computer_call":
        return {"type": kind, "id": f"cu_{k}", "call_id": call, "action": {"type": "wait"}}
    if kind == "future_call":
        return {"type": kind, "call_id": call, "data": draw(texts)}
    return {"type": kind, "id": f"{kind}_{k}", "status": "completed"}


def _output(draw: st.DrawFn, call: dict[str, Any]) -> dict[str, Any]:
    kind, call_id = call["type"], call["call_id"]
    if kind == "computer_call":
        return {"type": "computer_call_output", "call_id": call_id, "output": SCREENSHOT}
    if kind == "local_shell_call" and draw(st.booleans()):
        return {"type": "local_shell_call_output", "id": call_id, "output": draw(texts)}
    output: Any = draw(texts)
    if kind == "function_call" and draw(st.booleans()):
        output = [{"type": "input_text", "text": output}]
    if kind == "future_call":
        output = {"value": output}
    return {"type": f"{kind}_output", "call_id": call_id, "output": output}


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    ids = itertools.count()
    items = [
        _client_message(draw, draw(st.sampled_from(["system", "developer"])))
        for _ in range(draw(st.integers(0, 2)))
    ]
    for _ in range(draw(st.integers(0, 4))):
        items.append(_client_message(draw, draw(st.sampled_from(["user", "user", "developer"]))))
        for _ in range(draw(st.integers(0, 3))):
            step = [_model_item(draw, next(ids)) for _ in range(draw(st.integers(1, 4)))]
            items.extend(step)
            calls = [i for i in step if "call_id" in i]
            answered = draw(st.lists(st.sampled_from(calls), unique_by=id)) if calls else []
            items.extend(_output(draw, c) for c in answered)
    return items


@settings(max_examples=300, deadline=None)
@given(histories())
def test_round_trip_is_byte_identical(items: list[dict[str, Any]]) -> None:
    wire = orjson.dumps(items)
    messages = items_to_messages(items)
    validate(messages)
    back = messages_to_items(messages)
    assert orjson.dumps(back) == wire
    assert all(a is b for a, b in zip(back, items, strict=True))


@settings(max_examples=200, deadline=None)
@given(histories())
def test_an_unchanged_history_sent_as_it_came_is_what_converting_back_gives(
    items: list[dict[str, Any]],
) -> None:
    """The fast path for a turn nothing applies to (`Outgoing.unchanged`) sends the client's
    own `input`: byte for byte what converting the neutral messages back would send."""
    from proxy.wire.responses.adapter import ResponsesWire

    wire = ResponsesWire()
    body = {"model": "m", "instructions": "rules", "input": items, "store": False}
    frozen = orjson.dumps(body)
    rb = rebuild(items_to_messages(items), None)
    out = rb.outgoing()
    assert out.unchanged
    tools = wire.with_extract_tool([])
    fast = wire.upstream_body(body, out, tools, stream=False)
    out.unchanged = False
    assert orjson.dumps(fast) == orjson.dumps(wire.upstream_body(body, out, tools, stream=False))
    assert orjson.dumps(body) == frozen


@settings(max_examples=200, deadline=None)
@given(histories())
def test_reclaiming_every_result_changes_only_outputs(items: list[dict[str, Any]]) -> None:
    wire = orjson.dumps(items)
    messages = items_to_messages(items)
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            messages[i] = {**m, "content": placeholder_for(f"k{i}")}
    back = messages_to_items(messages)
    assert orjson.dumps(items) == wire  # the client's items are untouched
    assert len(back) == len(items)
    for new, old in zip(back, items, strict=True):
        if new is old:
            continue
        # text outputs only: never a screenshot, never a structured (dict) output
        assert old["type"] in ("function_call_output", "custom_tool_call_output") or (
            old["type"] == "local_shell_call_output" and isinstance(old["output"], str)
        )
        assert {k: v for k, v in new.items() if k != "output"} == {
            k: v for k, v in old.items() if k != "output"
        }
        assert new["output"].startswith("[Compacted, ID: k")
    reasoning = [i for i in back if i.get("type") == "reasoning"]
    assert reasoning == [i for i in items if i.get("type") == "reasoning"]


@pytest.mark.parametrize(
    "module",
    [
        responses_back,
        responses_items,
        responses_requests,
        responses_rounds,
        responses_stream,
        responses_tool,
    ],
)
def test_the_adapter_is_pure_and_small(module: Any) -> None:
    path = Path(module.__file__)
    assert imported_roots(path) & FORBIDDEN == set()
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 400


def test_extract_calls_are_found_among_a_rounds_tool_calls() -> None:
    message = output_to_message([fc("c1"), fc("x1", EXTRACT_TOOL_NAME, "{}")])
    found = [c["id"] for c in message["tool_calls"] if is_extract_call(c)]
    assert found == ["x1"]
