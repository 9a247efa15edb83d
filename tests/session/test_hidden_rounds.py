"""The proxy's hidden extract rounds: kept in place, stored as references (issues 25, 26).

An only-extract round goes upstream again before the assistant message the client echoes
for that turn; its answers are not stored but re-derived from the client's messages, so a
round whose original is gone (or changed) is dropped, and the client's message goes up as
it sent it. A large extracted result costs the session's stored state nothing: with a 1 MiB
cap and 60 KB results extracted every turn, every answered turn is recorded.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.session.hidden_rounds import round_entry
from proxy.session.rebuild import rebuild, record_turn
from proxy.session.state import SessionState, add_round
from proxy.settings import MiB
from proxy.wire.base import Round
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.messages.adapter import MessagesWire
from proxy.wire.messages.from_neutral import from_neutral
from proxy.wire.messages.reply import reply_round
from proxy.wire.messages.to_neutral import to_neutral
from proxy.wire.responses.adapter import ResponsesWire
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import items_to_messages
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import SYSTEM, TOOLS, is_summary_request
from tests.support.claude_model import PLACEHOLDER
from tests.support.fake_upstream import FakeUpstream, Reply

WIRE = ChatWire()


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c0", "read_file", "{}")]},
        {"role": "tool", "tool_call_id": "c0", "content": "the original of c0"},
    ]


EXTRACT = _call("x1", EXTRACT_TOOL_NAME, '{"toolcall_id": "c0"}')
ROUND = {"role": "assistant", "content": "Let me look again. ", "tool_calls": [EXTRACT]}
ANSWER = {"role": "tool", "tool_call_id": "x1", "content": "the original of c0"}
FINAL = {"role": "assistant", "content": "Done."}


def _state_with_round(stream: bool) -> SessionState:
    """The turn after `_history`: the model asked for c0 (text first), then answered."""
    history = _history()
    rb = rebuild(history, None, unmerge=WIRE.unmerge)
    message, shown = WIRE.hidden_round({}, _round(), stream=stream)
    add_round(rb.state, len(history), round_entry(message, shown, [ANSWER]))
    return SessionState.from_bytes(record_turn(rb, total_tokens=100).to_bytes())


def _round() -> Round:
    return Round(message=ROUND, usage=None, only_extract=True)


def test_a_round_goes_back_before_the_echo_and_stores_no_answer() -> None:
    state = _state_with_round(stream=False)
    assert b"the original of c0" not in state.to_bytes()  # a digest, not the answer
    nxt = [*_history(), FINAL, {"role": "user", "content": "more"}]
    sent = rebuild(nxt, state, unmerge=WIRE.unmerge).upstream_messages()
    assert sent == [*_history(), ROUND, ANSWER, FINAL, {"role": "user", "content": "more"}]


def test_a_streamed_round_is_split_off_the_echo() -> None:
    """Streamed, the client saw the round's text before the final round's: its echo holds
    both, and only the final round's part follows the hidden round upstream."""
    state = _state_with_round(stream=True)
    echo = {"role": "assistant", "content": "Let me look again. Done."}
    sent = rebuild([*_history(), echo], state, unmerge=WIRE.unmerge).upstream_messages()
    assert sent == [*_history(), ROUND, ANSWER, FINAL]
    # An echo that does not start with what the client saw is not split: no round.
    other = {"role": "assistant", "content": "Something else."}
    sent = rebuild([*_history(), other], state, unmerge=WIRE.unmerge).upstream_messages()
    assert sent == [*_history(), other]


def test_a_round_whose_original_is_gone_is_dropped() -> None:
    state = _state_with_round(stream=False)
    history = _history()
    history[3] = {**history[3], "content": "an edited result"}  # the reference no longer holds
    nxt = [*history, FINAL]
    rb = rebuild(nxt, state, unmerge=WIRE.unmerge)
    assert rb.upstream_messages() == nxt
    assert rb.state.hidden == []


def test_a_branch_that_drops_the_turn_drops_the_round() -> None:
    state = _state_with_round(stream=False)
    kept = rebuild([*_history(), FINAL], state, unmerge=WIRE.unmerge)  # pinned to this turn
    state = SessionState.from_bytes(record_turn(kept, total_tokens=100).to_bytes())
    branch = [*_history(), {"role": "assistant", "content": "Another answer."}]
    assert rebuild(branch, state, unmerge=WIRE.unmerge).upstream_messages() == branch


# -- the session cap (issue 26, item 5) ----------------------------------------------------

RESULT_BYTES = 60_000
TURNS = 30


def _result(n: int) -> str:
    """60 KB of text that compresses like source code does, not like one repeated byte."""
    rng = random.Random(n)
    words = [f"token_{rng.randrange(5000)}" for _ in range(RESULT_BYTES // 8)]
    return " ".join(words)[:RESULT_BYTES]


class MixedExtracts:
    """Reads a file each turn and, once placeholders exist, asks beside it for the newest
    `per_turn` of them back (mixed rounds: the client sees only its own call)."""

    def __init__(self, per_turn: int = 4) -> None:
        self.turn = 0
        self.per_turn = per_turn
        self.extracted: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return Reply.text("## overview\nFiles are being read one by one.")
        self.turn += 1
        read = {"name": "read_file", "arguments": {"path": f"f{self.turn}.py"}}
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        found = [PLACEHOLDER.search(str(m.get("content"))) for m in body["messages"]]
        ids = [f[1] for f in found if f is not None][-self.per_turn :]
        if EXTRACT_TOOL_NAME not in offered or not ids:
            return Reply(tool_calls=[read])
        self.extracted += ids
        calls = [{"name": EXTRACT_TOOL_NAME, "arguments": {"toolcall_id": i}} for i in ids]
        return Reply(tool_calls=[*calls, read])


def test_large_extracted_results_leave_every_turn_recorded_under_a_1_mib_cap(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """Before: each hidden answer was a copy in the session's state; 60 KB ones filled a
    1 MiB cap and turn records were lost (the issue: 71 of 90 were recorded; here, four
    results asked back per turn, 24 of 30)."""
    fake_upstream.default = model = MixedExtracts()
    proxy = make_proxy(token_threshold=40_000, session_max_bytes=MiB)
    client = openai_client(proxy, session="cap")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read every file."},
    ]
    for _ in range(TURNS):
        completion = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            assert call.function.name != EXTRACT_TOOL_NAME
            content = _result(len(messages))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    rows = httpx.get(proxy.url + "/admin/sessions", timeout=30).json()["data"]
    (row,) = [r for r in rows if r["session"] == "cap"]
    detail = httpx.get(proxy.url + f"/admin/sessions/{row['id']}", timeout=30).json()
    assert len(detail["turns"]) == TURNS
    assert len(model.extracted) >= 30, len(model.extracted)
    assert detail["state"]["hidden"] >= 1


# -- each wire splits the client's echo at the round's end ---------------------------------


def test_messages_round_goes_back_as_the_model_wrote_it() -> None:
    """Anthropic Messages: the round's assistant turn byte for byte (thinking and signature,
    text, the extract `tool_use`), then the proxy's `tool_result` turn; the client's echo of
    the merged reply loses the blocks it saw of the round."""
    wire = MessagesWire()
    thinking = {"type": "thinking", "thinking": "I need c0.", "signature": "c2lnMQ=="}
    text = {"type": "text", "text": "Looking again."}
    use = {"type": "tool_use", "id": "toolu_x", "name": EXTRACT_TOOL_NAME, "input": {}}
    reply = {"type": "message", "role": "assistant", "content": [thinking, text, use]}
    message, shown = wire.hidden_round({}, reply_round(reply), stream=True)
    assert shown == ["thinking", "text"]
    answer = {"role": "tool", "tool_call_id": "toolu_x", "content": "the original"}
    first = {"role": "user", "content": "go"}
    (user,) = to_neutral(None, [first])
    result = {"type": "tool_result", "tool_use_id": "toolu_x", "content": "the original"}
    assert from_neutral([user, message, answer])[1] == [
        first,
        {"role": "assistant", "content": [thinking, text, use]},
        {"role": "user", "content": [result]},
    ]
    final = [{"type": "thinking", "thinking": "Done.", "signature": "c2lnMg=="}, text]
    echo = to_neutral(None, [first, {"role": "assistant", "content": [thinking, text, *final]}])
    (rest,) = wire.unmerge(echo[1], shown) or [None]
    assert rest is not None
    assert from_neutral([user, rest])[1] == [first, {"role": "assistant", "content": final}]
    bare = to_neutral(None, [first, {"role": "assistant", "content": final}])[1]
    assert wire.unmerge(bare, ["text"]) is None


def test_responses_round_goes_back_as_the_model_wrote_it() -> None:
    """Responses: the round's output items as sent, then a `function_call_output`; the
    client's echoed run of items loses the ones it saw of the round (matched by id)."""
    wire = ResponsesWire()
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"}
    said = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_x",
        "name": EXTRACT_TOOL_NAME,
        "arguments": '{"toolcall_id": "c0"}',
    }
    response = {"id": "resp_1", "status": "completed", "output": [reasoning, said, call]}
    rnd = wire.reply_round(response)
    message, shown = wire.hidden_round({}, rnd, stream=False)
    assert shown == [["reasoning", "rs_1"], ["message", "msg_1"]]
    answer = {"role": "tool", "tool_call_id": "call_x", "content": "the original"}
    assert messages_to_items([message, answer]) == [
        reasoning,
        said,
        call,
        {"type": "function_call_output", "call_id": "call_x", "output": "the original"},
    ]
    after = [{"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "e2"}]
    after.append({"type": "message", "id": "msg_2", "role": "assistant", "content": []})
    echo = items_to_messages([{"role": "user", "content": "go"}, reasoning, said, *after])[1]
    (rest,) = wire.unmerge(echo, shown) or [None]
    assert rest is not None and messages_to_items([rest]) == after
    other = items_to_messages([{"role": "user", "content": "go"}, *after])[1]
    assert wire.unmerge(other, shown) is None
