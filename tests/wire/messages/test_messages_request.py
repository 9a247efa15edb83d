"""The rest of a Messages request: summary block, cache breakpoints, the extract tool, checks."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proxy
from proxy.session.extract_tool import TOOL_DEFINITION
from proxy.session.rebuild import Outgoing, rebuild
from proxy.session.state import SessionState
from proxy.wire.base import Round
from proxy.wire.messages.bodies import (
    EXTRACT_TOOL,
    MAX_BREAKPOINTS,
    SUMMARY_MAX_TOKENS,
    client_defines_tool,
    continue_body,
    count_breakpoints,
    error_body,
    inject_tool,
    is_extract_use,
    limit_breakpoints,
    summary_body,
    upstream_body,
    with_summary,
)
from proxy.wire.messages.checks import MalformedRequest, check_request, request_error
from proxy.wire.messages.from_neutral import CONTINUED
from proxy.wire.messages.to_neutral import to_neutral
from proxy.wire.refusal import window_of
from tests.core.test_purity import FORBIDDEN, imported_roots

from .messages_cases import (
    SYSTEM_BLOCKS,
    anthropic_errors,
    requests,
    session,
    tool_result,
    tool_use,
)

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}

# -- tools ----------------------------------------------------------------------------------

CLIENT_TOOLS: list[dict[str, Any]] = [
    {"name": "Read", "description": "read", "input_schema": {"type": "object"}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    {"type": "bash_20250124", "name": "bash", "cache_control": EPHEMERAL},
]


def test_the_extract_tool_has_anthropics_shape_and_the_shared_description() -> None:
    assert set(EXTRACT_TOOL) == {"name", "description", "input_schema"}
    assert EXTRACT_TOOL["name"] == "extract_compacted_tool_result"
    assert EXTRACT_TOOL["description"] == TOOL_DEFINITION["function"]["description"]
    schema = EXTRACT_TOOL["input_schema"]
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"toolcall_id", "offset", "query"}
    assert schema["properties"]["toolcall_id"]["type"] == "string"
    assert schema["properties"]["offset"]["type"] == "integer"
    assert schema["properties"]["query"]["type"] == "string"


@pytest.mark.parametrize("tools", [None, [], CLIENT_TOOLS, "junk"])
def test_inject_appends_ours_after_the_clients_tools_unchanged(tools: Any) -> None:
    before = copy.deepcopy(tools)
    out = inject_tool(tools)
    assert out[-1] == EXTRACT_TOOL and out[-1] is not EXTRACT_TOOL
    assert out[:-1] == (tools if isinstance(tools, list) else [])
    assert tools == before


@pytest.mark.parametrize(
    ("tools", "defined"),
    [
        (None, False),
        (CLIENT_TOOLS, False),
        ([*CLIENT_TOOLS, {"name": "extract_compacted_tool_result", "input_schema": {}}], True),
        ([{"type": "function", "function": {"name": "extract_compacted_tool_result"}}], False),
        (["junk", 3], False),
    ],
)
def test_a_client_tool_of_our_name_is_recognised(tools: Any, defined: bool) -> None:
    assert client_defines_tool(tools) is defined


@pytest.mark.parametrize(
    ("block", "extract"),
    [
        (tool_use("t", name="extract_compacted_tool_result", toolcall_id="x"), True),
        (tool_use("t"), False),
        ({"type": "server_tool_use", "name": "extract_compacted_tool_result"}, False),
        ("junk", False),
    ],
)
def test_extract_calls_are_recognised_by_block(block: Any, extract: bool) -> None:
    assert is_extract_use(block) is extract


# -- the summary ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "messages", "expected_head", "mark"),
    [
        (None, [], [], EPHEMERAL),
        ("", [], [], EPHEMERAL),
        ("You are CC.", [], [{"type": "text", "text": "You are CC."}], EPHEMERAL),
        (SYSTEM_BLOCKS, [], SYSTEM_BLOCKS, EPHEMERAL),
        (
            [{"type": "text", "text": "a", "cache_control": HOUR}, {"type": "text", "text": "b"}],
            [],
            [{"type": "text", "text": "a", "cache_control": HOUR}, {"type": "text", "text": "b"}],
            HOUR,
        ),
        (
            "plain",
            [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": HOUR}]}],
            [{"type": "text", "text": "plain"}],
            HOUR,
        ),
    ],
)
def test_the_summary_follows_the_clients_system_and_marks_a_stable_prefix(
    system: Any, messages: Any, expected_head: Any, mark: Any
) -> None:
    before = copy.deepcopy(system)
    out = with_summary(system, "SUMMARY", messages)
    assert out[:-1] == expected_head
    assert out[-1] == {"type": "text", "text": "SUMMARY", "cache_control": mark}
    assert system == before
    if isinstance(system, list):
        assert all(a is b for a, b in zip(out, system, strict=False))


# -- cache breakpoints ----------------------------------------------------------------------


def marked_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": EPHEMERAL}


def test_a_request_within_the_limit_is_returned_as_it_is() -> None:
    msgs = session()
    system, tools, out = limit_breakpoints(SYSTEM_BLOCKS, CLIENT_TOOLS, msgs)
    assert count_breakpoints(SYSTEM_BLOCKS, CLIENT_TOOLS, msgs) == 5
    system, tools, out = limit_breakpoints(SYSTEM_BLOCKS, CLIENT_TOOLS[:2], msgs)
    assert (system, tools, out) == (SYSTEM_BLOCKS, CLIENT_TOOLS[:2], msgs)
    assert out is msgs


def test_the_earliest_message_breakpoints_go_first() -> None:
    msgs = session()  # breakpoints on a tool_result (message 2) and on message 7
    frozen = orjson.dumps(msgs)
    summary_system = with_summary(SYSTEM_BLOCKS, "S", msgs)  # 3 breakpoints in system
    tools_in = CLIENT_TOOLS[:2]
    system, tools, out = limit_breakpoints(summary_system, tools_in, msgs)
    assert count_breakpoints(system, tools, out) == MAX_BREAKPOINTS
    assert system is summary_system and tools is tools_in  # 3 + the newest 1 fit
    assert "cache_control" not in out[2]["content"][1]
    assert out[7]["content"][1]["cache_control"] == EPHEMERAL
    assert out[2]["content"][0] is msgs[2]["content"][0]
    assert [out[i] is msgs[i] for i in range(len(msgs))].count(False) == 1
    assert orjson.dumps(msgs) == frozen
    # With the client's tool breakpoint too, both message breakpoints go.
    system, tools, out = limit_breakpoints(summary_system, CLIENT_TOOLS, msgs)
    assert count_breakpoints(system, tools, out) == MAX_BREAKPOINTS
    assert count_breakpoints(None, None, out) == 0 and tools is CLIENT_TOOLS


def test_then_tools_and_system_go_in_prompt_order() -> None:
    system_in = [marked_text("a"), marked_text("b"), marked_text("c"), marked_text("summary")]
    tools_in = [{**t, "cache_control": EPHEMERAL} for t in CLIENT_TOOLS]
    msgs = [{"role": "user", "content": [marked_text("q")]}]
    system, tools, out = limit_breakpoints(system_in, tools_in, msgs)
    assert count_breakpoints(system, tools, out) == 4
    assert "cache_control" not in out[0]["content"][0]
    assert [("cache_control" in t) for t in tools] == [False, False, False]
    assert [("cache_control" in b) for b in system] == [True, True, True, True]
    system, tools, out = limit_breakpoints(system_in, tools_in, msgs, limit=1)
    assert [("cache_control" in b) for b in system] == [False, False, False, True]
    assert count_breakpoints(system, tools, out) == 1
    assert all("cache_control" in b for b in system_in)  # the inputs are not edited
    assert all("cache_control" in t for t in tools_in)


def test_nested_tool_result_breakpoints_count_and_can_be_dropped() -> None:
    nested = {
        "role": "user",
        "content": [tool_result("t1", [marked_text("x"), marked_text("y")]), marked_text("z")],
    }
    msgs = [{"role": "assistant", "content": [tool_use("t1")]}, nested]
    assert count_breakpoints(None, None, msgs) == 3
    _, _, out = limit_breakpoints(None, None, msgs, limit=1)
    inner = out[1]["content"][0]["content"]
    assert ["cache_control" in b for b in inner] == [False, False]
    assert out[1]["content"][1]["cache_control"] == EPHEMERAL
    assert "cache_control" in nested["content"][0]["content"][0]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.booleans(), max_size=6),
    st.lists(st.booleans(), max_size=6),
    st.lists(st.lists(st.booleans(), max_size=4), max_size=6),
)
def test_any_request_ends_within_the_limit_keeping_the_newest_marks(
    system_marks: list[bool], tool_marks: list[bool], message_marks: list[list[bool]]
) -> None:
    def block(i: int, marked: bool) -> dict[str, Any]:
        return marked_text(str(i)) if marked else {"type": "text", "text": str(i)}

    system = [block(i, m) for i, m in enumerate(system_marks)]
    tools = [{"name": f"t{i}", **({"cache_control": EPHEMERAL} if m else {})} for i, m in
             enumerate(tool_marks)]  # fmt: skip
    msgs = [
        {"role": "user", "content": [block(j, m) for j, m in enumerate(marks)]}
        for marks in message_marks
    ]
    total = count_breakpoints(system, tools, msgs)
    new_system, new_tools, new_msgs = limit_breakpoints(system, tools, msgs)
    # A bound on the messages' breakpoints (the count from their bytes) changes nothing.
    bound = orjson.dumps(msgs).count(b'"cache_control":')
    bounded = limit_breakpoints(system, tools, msgs, message_marks_at_most=bound)
    assert bounded == (new_system, new_tools, new_msgs)
    kept = count_breakpoints(new_system, new_tools, new_msgs)
    assert kept == min(total, MAX_BREAKPOINTS)
    in_messages = [(k, b) for k, m in enumerate(msgs) for b, x in enumerate(m["content"])
                   if "cache_control" in x]  # fmt: skip
    still = [(k, b) for k, b in in_messages if "cache_control" in new_msgs[k]["content"][b]]
    assert still == in_messages[len(in_messages) - len(still) :]  # the newest survive
    if any(system_marks):  # the last system mark is the last to go
        last = max(i for i, m in enumerate(system_marks) if m)
        assert "cache_control" in new_system[last]
    for before, after in zip(msgs, new_msgs, strict=True):
        assert [b["text"] for b in before["content"]] == [b["text"] for b in after["content"]]


# -- checks ---------------------------------------------------------------------------------


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 10, **fields}


CALL = {"role": "assistant", "content": [tool_use("toolu_1")]}


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ([], "The request body must be a JSON object."),
        (body(), "messages: Input should be a valid list"),
        (body(messages="hi"), "messages: Input should be a valid list"),
        (body(messages=[]), "messages: at least one message is required"),
        (body(messages=["hi"]), "messages.0: Input should be an object"),
        (body(messages=[{"role": "bot", "content": "x"}]), "messages.0.role: Input should be"),
        (body(messages=[{"role": "user"}]), "messages.0.content: Input should be a string"),
        (body(messages=[{"role": "user", "content": [{"text": "x"}]}]), "content.0.type: Field"),
        (body(messages=[{"role": "user", "content": [7]}]), "content.0: Input should be an object"),
        (
            body(messages=[{"role": "user", "content": [{"type": "text", "text": 3}]}]),
            "messages.0.content.0.text: Field required",
        ),
        (
            body(messages=[{"role": "user", "content": [tool_result("toolu_9")]}]),
            "messages.0.content.0: unexpected `tool_use_id` in a `tool_result` block: toolu_9.",
        ),
        (
            body(messages=[CALL, {"role": "user", "content": [tool_result("toolu_2")]}]),
            "unexpected `tool_use_id`",
        ),
        (
            body(messages=[CALL, {"role": "user", "content": [{"type": "tool_result"}]}]),
            "messages.1.content.0.tool_result.tool_use_id: Field required",
        ),
        (
            body(messages=[CALL, {"role": "user", "content": [tool_result("toolu_1", 5)]}]),
            "messages.1.content.0.tool_result.content: Input should be a string or a list",
        ),
        (
            body(messages=[CALL, {"role": "user", "content": [tool_result("toolu_1", [{}])]}]),
            "messages.1.content.0.tool_result.content.0.type: Field required",
        ),
        (
            body(messages=[{"role": "assistant", "content": [{"type": "tool_use", "id": "x"}]}]),
            "messages.0.content.0.tool_use.name: Field required",
        ),
        (
            body(messages=[{"role": "assistant", "content": [{**tool_use("x"), "input": []}]}]),
            "messages.0.content.0.tool_use.input: Input should be an object",
        ),
        (body(system=5, messages=[{"role": "user", "content": "x"}]), "system: Input should be"),
        (body(system=[{"type": "image"}], messages=[{"role": "user", "content": "x"}]), "system.0"),
        (
            body(system=[{"type": "text"}], messages=[{"role": "user", "content": "x"}]),
            "system.0.text: Field required",
        ),
    ],
)
def test_malformed_bodies_are_refused_with_a_message_naming_the_place(
    request_body: Any, message: str
) -> None:
    error = request_error(request_body)
    assert error is not None and message in error
    with pytest.raises(MalformedRequest):
        check_request(request_body)


@pytest.mark.parametrize(
    "request_body",
    [
        body(system=SYSTEM_BLOCKS, messages=session()),
        body(system="plain", messages=[{"role": "user", "content": "hi"}]),
        body(system=None, messages=[{"role": "assistant", "content": "prefill"}]),
        body(messages=[{"role": "user", "content": [{"type": "brand_new_block", "x": 1}]}]),
    ],
)
def test_well_formed_bodies_pass(request_body: Any) -> None:
    assert request_error(request_body) is None


MODULES = ["messages/from_neutral", "messages/content", "messages/reply", "messages/bodies"]


@pytest.mark.parametrize("name", [*MODULES, "messages/stream"])
def test_the_messages_adapter_is_pure(name: str) -> None:
    path = Path(proxy.__file__).parent / "wire" / f"{name}.py"
    assert imported_roots(path) & FORBIDDEN == set()


# -- bodies ---------------------------------------------------------------------------------


def client_body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": SYSTEM_BLOCKS,
        "messages": session(),
        "tools": CLIENT_TOOLS[:2],
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "stream": True,
        "metadata": {"user_id": "u"},
        **fields,
    }


def outgoing(body: dict[str, Any], summary: str | None = None, keep: int = 0) -> Outgoing:
    neutral = to_neutral(body.get("system"), body["messages"])
    system_count = 1 if body.get("system") is not None else 0
    rest = neutral[system_count + keep :]
    return Outgoing(neutral, neutral[:system_count], summary, rest)


def test_an_unchanged_turn_goes_up_as_the_client_sent_it_plus_our_tool() -> None:
    body = client_body()
    frozen = orjson.dumps(body)
    tools = inject_tool(body["tools"])
    for out in (None, outgoing(body)):
        sent = upstream_body(body, out, tools)
        expected = {**body, "tools": tools}
        assert orjson.dumps(sent) == orjson.dumps(expected)
    assert upstream_body(body, None, None) == body
    assert orjson.dumps(body) == frozen


@settings(max_examples=200, deadline=None)
@given(requests())
def test_an_unchanged_history_sent_as_it_came_is_what_converting_back_gives(request: Any) -> None:
    """The fast path for a turn nothing applies to (`Outgoing.unchanged`) sends the client's
    own `messages`: byte for byte what converting the neutral messages back would send."""
    system, messages = request
    body = {"model": "m", "max_tokens": 1, "messages": messages}
    if system is not None:
        body["system"] = system
    frozen = orjson.dumps(body)
    neutral = to_neutral(system, messages)
    count = 1 if system is not None else 0
    tools = inject_tool([])
    slow = Outgoing(neutral, neutral[:count], None, neutral[count:])
    fast = Outgoing(neutral, neutral[:count], None, neutral[count:], unchanged=True)
    expected = orjson.dumps(upstream_body(body, slow, tools))
    assert orjson.dumps(upstream_body(body, fast, tools)) == expected
    # Its breakpoints bounded from the history's bytes, not counted: the same body.
    written = replace(fast, history_json=orjson.dumps(messages))
    assert orjson.dumps(upstream_body(body, written, tools)) == expected
    assert orjson.dumps(body) == frozen


def test_rebuild_marks_a_history_nothing_applies_to_as_unchanged() -> None:
    body = client_body()
    neutral = to_neutral(body["system"], body["messages"])
    assert rebuild(neutral, None).outgoing().unchanged
    state = SessionState(reclaimed=["toolu_2"])
    assert not rebuild(neutral, state).outgoing().unchanged


def test_a_summarised_turn_keeps_the_client_system_then_the_summary() -> None:
    body = client_body()
    neutral = to_neutral(body["system"], body["messages"])
    out = Outgoing(neutral, neutral[:1], "SUMMARY", neutral[6:])  # from the mid system message
    sent = upstream_body(body, out, inject_tool(body["tools"]))
    assert sent["system"][:2] == SYSTEM_BLOCKS
    assert sent["system"][2] == {"type": "text", "text": "SUMMARY", "cache_control": EPHEMERAL}
    assert sent["messages"][0] == {"role": "user", "content": CONTINUED}
    assert sent["messages"][1:] == body["messages"][3:]
    assert count_breakpoints(sent["system"], sent["tools"], sent["messages"]) == 4
    assert {k: v for k, v in sent.items() if k not in ("system", "messages", "tools")} == {
        k: v for k, v in body.items() if k not in ("system", "messages", "tools")
    }


def test_a_plain_string_system_gets_the_summary_as_a_second_block() -> None:
    body = client_body(system="Be brief.")
    sent = upstream_body(body, outgoing(body, "SUM", keep=0), None)
    assert sent["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "SUM", "cache_control": EPHEMERAL},
    ]
    no_system = client_body()
    del no_system["system"]
    sent = upstream_body(no_system, outgoing(no_system, "SUM"), None)
    assert sent["system"] == [{"type": "text", "text": "SUM", "cache_control": EPHEMERAL}]
    assert "system" not in upstream_body(no_system, outgoing(no_system), None)


def test_the_next_round_carries_the_reply_verbatim_and_our_answers() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    reply = {
        "id": "msg_1",
        "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            tool_use("toolu_x", name="extract_compacted_tool_result", toolcall_id="a"),
        ],
    }
    results = [{"role": "tool", "tool_call_id": "toolu_x", "content": "original"}]
    rnd = Round(message={}, usage=None, only_extract=True, raw=reply)
    nxt = continue_body(body, rnd, results)
    assert nxt["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": reply["content"]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "original"}],
        },
    ]
    assert body["messages"] == [{"role": "user", "content": "q"}]
    assert continue_body(body, rnd, [])["messages"][-1]["role"] == "assistant"


def test_a_summary_request_repeating_the_turn_keeps_its_blocks_and_thinking() -> None:
    body = client_body()
    neutral = to_neutral(body["system"], body["messages"])
    tools = inject_tool(body["tools"])
    chat = {
        "model": "claude-sonnet-4-5",
        "messages": [*neutral, {"role": "user", "content": "Summarise now."}],
        "stream": False,
        "tools": tools,
    }
    sent = summary_body(body, chat)
    assert sent["system"] == SYSTEM_BLOCKS and sent["tools"] == tools
    # The turn's messages as sent (the cached prefix), then the instruction.
    assert orjson.dumps(sent["messages"][:-1]) == orjson.dumps(body["messages"])
    assert sent["messages"][-1] == {"role": "user", "content": "Summarise now."}
    assert sent["thinking"] == body["thinking"] and sent["max_tokens"] == 32000
    # Another summary model may not think: then no thinking, our own max_tokens.
    other = summary_body(body, {**chat, "model": "claude-haiku-4-5"})
    assert "thinking" not in other and other["max_tokens"] == SUMMARY_MAX_TOKENS
    assert "tool_choice" not in sent and sent["stream"] is False
    assert anthropic_errors(sent["messages"]) == []


def test_a_summary_request_of_a_span_without_tools_turns_tool_blocks_into_text() -> None:
    neutral = to_neutral(None, session())
    chat = {
        "model": "claude",
        "messages": [
            {"role": "system", "content": "Summarise."},
            *neutral[2:7],  # starts at the results of toolu_1 / toolu_2
            {"role": "user", "content": "Write it."},
        ],
    }
    sent = summary_body(None, chat)
    assert sent["system"] == "Summarise." and sent["max_tokens"] == SUMMARY_MAX_TOKENS
    assert "thinking" not in sent and "tools" not in sent
    kinds = [b.get("type") for m in sent["messages"] if isinstance(m["content"], list)
             for b in m["content"]]  # fmt: skip
    assert not {"tool_use", "tool_result", "server_tool_use", "web_search_tool_result"} & set(kinds)
    text = orjson.dumps(sent["messages"]).decode()
    assert "[tool call toolu_3] Bash" in text and "[tool result srvtoolu_1]" in text
    assert sent["messages"][-1]["content"] == "Write it."
    with_tools = summary_body(None, {**chat, "tools": CLIENT_TOOLS, "tool_choice": "none"})
    assert with_tools["tool_choice"] == {"type": "none"}
    assert [b["type"] for b in with_tools["messages"][2]["content"]][-1] == "tool_use"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_errors_take_anthropics_shape_and_type(status: int, kind: str) -> None:
    assert error_body(status, "why") == {"type": "error", "error": {"type": kind, "message": "why"}}
    # The proxy's own error types map by status unless Anthropic has the same type.
    assert error_body(status, "why", "server_error", "code")["error"]["type"] == kind
    assert error_body(status, "x", "overloaded_error")["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize(
    ("error", "window"),
    [
        (
            {"type": "error", "error": {"type": "invalid_request_error",
                                        "message": "prompt is too long: 215034 tokens > 200000"
                                                   " maximum"}},
            200000,
        ),
        ({"error": {"message": "input length and max_tokens exceed context limit"}}, None),
        ("prompt is too long: 1000001 tokens > 1000000 maximum", 1000000),
        (None, None),
    ],
)  # fmt: skip
def test_a_length_refusal_names_the_window(error: Any, window: int | None) -> None:
    assert window_of(error) == window


@pytest.mark.parametrize(
    "messages",
    [
        # one assistant turn sent as two messages, answered together
        [
            {"role": "assistant", "content": [tool_use("toolu_a")]},
            {"role": "assistant", "content": [tool_use("toolu_b")]},
            {"role": "user", "content": [tool_result("toolu_a"), tool_result("toolu_b")]},
        ],
        # answers sent as two user messages
        [
            {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]},
            {"role": "user", "content": [tool_result("toolu_a")]},
            {"role": "user", "content": [tool_result("toolu_b")]},
        ],
    ],
)
def test_turns_split_over_consecutive_messages_are_accepted(messages: Any) -> None:
    """Anthropic joins consecutive messages of one role into one turn: no 400 for them."""
    assert request_error(body(messages=[{"role": "user", "content": "go"}, *messages])) is None


def test_a_result_for_a_turn_before_the_last_is_refused() -> None:
    messages = [
        {"role": "user", "content": "go"},
        CALL,
        {"role": "user", "content": [tool_result("toolu_1")]},
        {"role": "assistant", "content": [tool_use("toolu_2")]},
        {"role": "user", "content": [tool_result("toolu_1")]},
    ]
    assert "messages.4.content.0: unexpected `tool_use_id`" in str(
        request_error(body(messages=messages))
    )
