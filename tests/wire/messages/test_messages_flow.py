"""The Messages pieces composed as the turn pipeline composes a wire, without I/O.

A Claude Code-like session is compacted by the real core, sent upstream as a Messages body,
answered by a scripted model that first calls the extract tool (a streamed round the client
never sees), then answers; the client gets one message and the next turn replays it.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.compact import placeholder_for
from proxy.session.extract_tool import answer, split_calls
from proxy.session.rebuild import apply_compaction, rebuild, record_turn
from proxy.wire.messages.bodies import continue_body, count_breakpoints, inject_tool, upstream_body
from proxy.wire.messages.checks import check_request
from proxy.wire.messages.reply import usage_total
from proxy.wire.messages.stream import MessagesRelay
from proxy.wire.messages.to_neutral import to_neutral

from .messages_cases import (
    SIG,
    SYSTEM_BLOCKS,
    USAGE_1,
    USAGE_2,
    anthropic_errors,
    client_view,
    relay_round,
    session,
    stream,
    text,
    use,
)

TOOLS = [
    {"name": "Read", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
]


def request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": SYSTEM_BLOCKS,
        "messages": messages,
        "tools": TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "stream": True,
    }


def test_a_compacted_turn_with_a_hidden_extract_round() -> None:
    body = request(session())
    check_request(body)
    frozen = orjson.dumps(body)
    rb = rebuild(to_neutral(body["system"], body["messages"]), None)
    rb.conversation.compact_toolcall(keep_max=1)
    apply_compaction(rb)
    sent = upstream_body(body, rb.outgoing(), inject_tool(body["tools"]), stream=True)
    check_request(sent)
    assert anthropic_errors(sent["messages"]) == []
    assert sent["tools"][-1]["name"] == "extract_compacted_tool_result"
    assert count_breakpoints(sent["system"], sent["tools"], sent["messages"]) <= 4
    placeholders = [b["content"] for b in sent["messages"][2]["content"][:2]]
    assert placeholders == [placeholder_for("toolu_1"), placeholder_for("toolu_2")]

    # Round 1: the model asks for toolu_1's original; the client must not see the call.
    relay = MessagesRelay()
    extract = use("toolu_x", "extract_compacted_tool_result", toolcall_id="toolu_1")
    think = {"type": "thinking", "thinking": "I need a.py", "signature": SIG}
    shown = relay_round(relay, stream("msg_1", [think, extract], "tool_use", USAGE_1))
    rnd = relay.end_round()
    _, calls = split_calls(rnd.message.get("tool_calls"))
    assert rnd.only_extract and [c["id"] for c in calls] == ["toolu_x"]
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": answer(c, rb.originals)} for c in calls
    ]
    assert results[0]["content"] == "A" * 300
    second = continue_body(sent, rnd, results)
    check_request(second)
    assert second["messages"][-2] == {"role": "assistant", "content": [think, extract]}
    assert anthropic_errors(second["messages"]) == []

    # Round 2: the answer. The client sees one message, indices from 0, usage summed.
    shown += relay_round(relay, stream("msg_2", [text("a.py is fine.")], "end_turn", USAGE_2))
    last = relay.end_round()
    events, message = client_view(shown + b"".join(relay.finish(hidden_last=False)))
    assert message["content"] == [think, text("a.py is fine.")]
    assert message["stop_reason"] == "end_turn" and message["id"] == "msg_1"
    assert "extract_compacted_tool_result" not in orjson.dumps(events).decode()
    assert usage_total(last.raw["usage"]) == 207
    assert orjson.dumps(body) == frozen  # the client's request was never edited

    # The next turn: the client echoes what it saw; reclaims still apply.
    state = record_turn(rb, total_tokens=usage_total(last.raw["usage"]))
    echoed = [*body["messages"], {"role": "assistant", "content": message["content"]},
              {"role": "user", "content": "thanks"}]  # fmt: skip
    rb2 = rebuild(to_neutral(body["system"], echoed), state)
    again = upstream_body(request(echoed), rb2.outgoing(), inject_tool(TOOLS))
    assert again["messages"][2] == sent["messages"][2]
    assert (
        again["messages"][-2]["content"][0] is think or again["messages"][-2]["content"][0] == think
    )
    assert anthropic_errors(again["messages"]) == []
