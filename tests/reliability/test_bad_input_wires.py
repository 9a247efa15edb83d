"""Bad input on /v1/responses and /v1/messages, against the real proxy (uvicorn, SQLite store).

What the API itself would refuse for its shape gets a 4xx in that API's shape from the proxy
(OpenAI's `{"error": {...}}`, Anthropic's `{"type": "error", "error": {...}}`) and never
reaches the upstream; what the API would accept, or what only the provider can judge, goes
upstream unchanged when the proxy cannot read the history. Never a 5xx of the proxy's own, and
never a lost or corrupted session: each bad request is sent under a real, compacted session's
header with its real history, and afterwards every stored state parses and the next good
request of that session is still compacted (its old outputs go up as placeholders).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.session.identity import session_header
from proxy.session.state import SessionState
from tests.support.fake_responses import PLACEHOLDER_RE, ReadFiles, Turn, input_items
from tests.support.wire_sessions import (
    INSTRUCTIONS,
    MESSAGES_MODEL,
    MESSAGES_SYSTEM,
    MESSAGES_TOOL,
    RESPONSES_MODEL,
    RESPONSES_TOOL,
    Run,
    WireProxy,
    run_messages,
    run_responses,
    wire_proxy,
)

MAX_BODY = 2 * 1024 * 1024
PROXY_500 = b"The proxy failed to handle the request."
OPENAI_HEADERS = {"authorization": "Bearer sk-client-openai", "session-id": "codex-1"}
ANTHROPIC_HEADERS = {
    "x-api-key": "sk-ant-client",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "mid-conversation-system",
    "x-claude-code-session-id": "claude-1",
}
USER = {"role": "user", "content": "go on"}
EXAMPLES = 40


class Unhandled(logging.Handler):
    """Records of the proxy's unexpected-exception logger."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Target:
    """The proxy, its store file, and the two real sessions the bad requests collide with."""

    def __init__(self, proxy: WireProxy, db: Path, codex: Run, claude: Run) -> None:
        self.proxy = proxy
        self.db = db
        self.codex = codex
        self.claude = claude
        self.http = httpx.Client(timeout=30)
        self.reclaimed = {name: set(s.reclaimed) for name, s in self.states().items()}

    def states(self) -> dict[str, SessionState]:
        """Every stored state, parsed (raises if one is corrupt), by session name (the
        session header's value: the stored key also names the wire, `proxy.session.identity`)."""
        self.proxy.server.settle()
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute("SELECT session, data FROM sessions").fetchall()
        return {
            session_header(str(name)): SessionState.from_bytes(bytes(data)) for name, data in rows
        }

    def responses(self, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        sent = {"content-type": "application/json", **(headers or OPENAI_HEADERS)}
        return self.http.post(self.proxy.url + "/v1/responses", content=content, headers=sent)

    def messages(self, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        sent = {"content-type": "application/json", **(headers or ANTHROPIC_HEADERS)}
        url = self.proxy.url + "/v1/messages?beta=true"
        return self.http.post(url, content=content, headers=sent)

    def responses_body(self, extra: list[Any]) -> dict[str, Any]:
        return {
            "model": RESPONSES_MODEL,
            "instructions": INSTRUCTIONS,
            "input": [*self.codex.history, *extra],
            "tools": [RESPONSES_TOOL],
            "store": False,
        }

    def messages_body(self, extra: list[Any]) -> dict[str, Any]:
        return {
            "model": MESSAGES_MODEL,
            "max_tokens": 4096,
            "system": MESSAGES_SYSTEM,
            "tools": [MESSAGES_TOOL],
            "messages": [*self.claude.history, *extra],
        }


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    db = tmp_path_factory.mktemp("wires") / "sessions.db"
    handler = Unhandled()
    errors = logging.getLogger("proxy.errors")
    errors.addHandler(handler)
    try:
        with wire_proxy(store_url=f"sqlite:///{db}", max_body_bytes=MAX_BODY) as proxy:
            codex = run_responses(proxy, session="codex-1", files=8)
            claude = run_messages(proxy, session="claude-1", files=8)
            assert "toolcall" in codex.compactions and "toolcall" in claude.compactions
            found = Target(proxy, db, codex, claude)
            yield found
            # The sessions outlive every bad request: their next good turn is still compacted.
            still_compacted(found)
            found.http.close()
            assert handler.records == [], [r.getMessage() for r in handler.records]
    finally:
        errors.removeHandler(handler)


def still_compacted(target: Target) -> None:
    proxy = target.proxy
    proxy.responses.policy = ReadFiles(8, tool="read_file")
    resp = target.responses(target.responses_body([USER]))
    assert resp.status_code == 200 and resp.headers["x-xun-session"] == target.codex.session_id
    assert resp.headers["x-xun-compaction"] != "unsupported"
    sent = proxy.responses.responses_requests[-1].json
    outputs = [str(i.get("output")) for i in input_items(sent) if "output" in i]
    assert any(PLACEHOLDER_RE.search(o) for o in outputs)
    resp = target.messages(target.messages_body([{"role": "user", "content": "go on"}]))
    assert resp.status_code == 200 and resp.headers["x-xun-session"] == target.claude.session_id
    last = proxy.messages.messages_requests[-1].json
    results = [
        b
        for m in last["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert any("[Compacted, ID: " in str(b.get("content")) for b in results)


def sessions_intact(target: Target, before: dict[str, SessionState]) -> None:
    """Every stored state parses, and the real sessions are still there, still compacted.

    (A request the upstream answers may extend a session, and compact it further: that is
    the session going on, so only losing what was compacted counts as damage.)
    """
    after = target.states()
    for name in ("codex-1", "claude-1"):
        assert after[name].wire == before[name].wire, name
        # What was reclaimed from the real history stays reclaimed: every request here
        # repeats that history (an edit after it may restart the state from there on).
        assert set(after[name].reclaimed) >= target.reclaimed[name], name
        assert after[name].summary_rounds >= before[name].summary_rounds, name


def assert_openai_error(resp: httpx.Response, status: int, param: str | None = None) -> None:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param and error["code"] == "invalid_type"


def assert_anthropic_error(resp: httpx.Response, status: int, kind: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind and body["error"]["message"]


def not_a_proxy_failure(resp: httpx.Response) -> None:
    assert resp.status_code < 500, resp.text[:300]
    assert PROXY_500 not in resp.content and b"Traceback" not in resp.content


# -- /v1/responses ----------------------------------------------------------------------------

R = [{"role": "user", "content": "hi"}]
OPENAI_REFUSES: dict[str, tuple[dict[str, Any], str]] = {
    "input is a number": ({"input": 5}, "input"),
    "input is an object": ({"input": {"role": "user"}}, "input"),
    "input is null": ({"input": None}, "input"),
    "instructions is a number": ({"input": R, "instructions": 5}, "instructions"),
    "instructions is a list": ({"input": R, "instructions": ["x"]}, "instructions"),
    "tools is a string": ({"input": R, "tools": "x"}, "tools"),
    "tools is an object": ({"input": R, "tools": {"type": "function"}}, "tools"),
}


@pytest.mark.parametrize("case", list(OPENAI_REFUSES))
def test_responses_wrong_types_are_refused_in_openais_shape(target: Target, case: str) -> None:
    fields, param = OPENAI_REFUSES[case]
    before, sent = target.states(), len(target.proxy.responses.responses_requests)
    resp = target.responses({"model": RESPONSES_MODEL, **fields})
    assert_openai_error(resp, 400, param)
    assert len(target.proxy.responses.responses_requests) == sent  # refused by the proxy
    sessions_intact(target, before)


UNREADABLE_ITEMS: dict[str, list[Any]] = {
    "an item that is a number": [1],
    "an item that is a string": ["function_call"],
    "an item without type or role": [{"foo": 1}],
    "a type that is a number": [{"type": 7}],
    "content that is a number": [{"role": "user", "content": 5}],
    "an unknown role": [{"role": "wizard", "content": "x"}],
    "an output without its call": [
        {"type": "function_call_output", "call_id": "call_nobody", "output": "x"}
    ],
    "an output without a call_id": [{"type": "function_call_output", "output": "x"}],
    "a call_id that is a number": [
        {"type": "function_call", "call_id": 5, "name": "f", "arguments": "{}"}
    ],
    "assistant content that is a number": [{"type": "message", "role": "assistant", "content": 5}],
}


@pytest.mark.parametrize("case", list(UNREADABLE_ITEMS))
def test_responses_histories_the_proxy_cannot_read_pass_through_unchanged(
    target: Target, case: str
) -> None:
    before = target.states()
    body = target.responses_body([*UNREADABLE_ITEMS[case], USER])
    resp = target.responses(body)
    not_a_proxy_failure(resp)
    if resp.status_code >= 400:
        assert_openai_error(resp, resp.status_code)  # the upstream's refusal, relayed
    assert resp.headers["x-xun-compaction"] == "none"
    # Sent as the client sent it: no placeholder, no extract tool, nothing reordered.
    assert target.proxy.responses.responses_requests[-1].json == body
    sessions_intact(target, before)


def test_responses_unknown_item_types_are_kept_verbatim(target: Target) -> None:
    unknown = [
        {"type": "future_call", "id": "fut_1", "call_id": "fc_9", "payload": {"deep": [1, None]}},
        {"type": "future_call_output", "call_id": "fc_9", "output": {"kept": True}},
        {"type": "hologram", "id": "h_1", "frames": [[0.5, "x"], {"z": None}]},
    ]
    before = target.states()
    target.proxy.responses.policy = ReadFiles(8, tool="read_file")
    resp = target.responses(target.responses_body([*unknown, USER]))
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-xun-compaction"] != "unsupported"
    sent = input_items(target.proxy.responses.responses_requests[-1].json)
    at = sent.index(unknown[0])
    assert sent[at : at + 3] == unknown  # verbatim, in order, never split from its pair
    assert any(PLACEHOLDER_RE.search(str(i.get("output"))) for i in sent if "output" in i)
    sessions_intact(target, before)


def test_responses_input_as_a_plain_string(target: Target) -> None:
    headers = {**OPENAI_HEADERS, "session-id": "plain-string"}
    target.proxy.responses.policy = ReadFiles(8, tool="read_file")
    for _ in range(2):
        resp = target.responses({"model": RESPONSES_MODEL, "input": "Read file_1.txt"}, headers)
        assert resp.status_code == 200 and resp.headers["x-xun-compaction"] == "none"
        sent = target.proxy.responses.responses_requests[-1].json
        # The string, or the one user message OpenAI reads it as.
        assert sent["input"] in (
            "Read file_1.txt",
            [{"role": "user", "content": "Read file_1.txt"}],
        )
    state = target.states()["plain-string"]
    assert state.wire == "responses" and state.view_messages()


def test_responses_huge_input(target: Target) -> None:
    before = target.states()
    huge = {"model": RESPONSES_MODEL, "input": "x" * (MAX_BODY + 10)}
    resp = target.responses(huge)
    assert_openai_error(resp, 413)
    assert resp.json()["error"]["code"] == "request_too_large"
    # Large but within the limit: passed and kept (a message too big to reclaim).
    target.proxy.responses.policy = ReadFiles(8, tool="read_file")
    large = {"model": RESPONSES_MODEL, "input": [{"role": "user", "content": "y" * 900_000}]}
    resp = target.responses(large, {**OPENAI_HEADERS, "session-id": "large"})
    assert resp.status_code == 200, resp.text[:300]
    assert target.states()["large"].wire == "responses"
    sessions_intact(target, before)


def test_previous_response_id_passes_through_and_is_never_stored(target: Target) -> None:
    target.proxy.responses.policy = lambda request: Turn(text="Hello.")
    first = target.http.post(
        target.proxy.url + "/v1/responses", json={"model": RESPONSES_MODEL, "input": "hi"}
    )
    assert first.status_code == 200  # no session header: passed through, held by the fake
    headers = {**OPENAI_HEADERS, "session-id": "server-held"}
    body = {"model": RESPONSES_MODEL, "input": R, "previous_response_id": first.json()["id"]}
    resp = target.responses(body, headers)
    assert resp.status_code == 200 and resp.headers["x-xun-compaction"] == "unsupported"
    assert target.proxy.responses.responses_requests[-1].json == body
    assert "server-held" not in target.states()


json_leaf = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
call_ids = st.sampled_from(["c1", "c2", "call_nobody"]) | json_leaf
response_item = (
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                [
                    "message",
                    "reasoning",
                    "function_call",
                    "function_call_output",
                    "custom_tool_call",
                    "custom_tool_call_output",
                    "local_shell_call",
                    "local_shell_call_output",
                    "web_search_call",
                    "item_reference",
                    "future_thing",
                ]
            )
            | json_leaf
        },
        optional={
            "role": st.sampled_from(["user", "assistant", "developer", "system", "wizard"])
            | json_leaf,
            "content": json_value,
            "call_id": call_ids,
            "id": call_ids,
            "name": st.sampled_from(["read_file", "extract_compacted_tool_result"]) | json_leaf,
            "arguments": st.text(max_size=20) | json_value,
            "output": json_value,
            "summary": json_value,
            "encrypted_content": json_leaf,
        },
    )
    | json_value
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    items=st.lists(response_item, max_size=5),
    on_history=st.booleans(),
    top=st.fixed_dictionaries(
        {}, optional={"instructions": json_leaf, "tools": st.lists(json_value, max_size=2)}
    ),
    stream=st.booleans(),
)
def test_responses_fuzz(
    target: Target, items: list[Any], on_history: bool, top: dict[str, Any], stream: bool
) -> None:
    before = target.states()
    target.proxy.responses.policy = ReadFiles(8, tool="read_file")
    body = target.responses_body(items) if on_history else {"model": "m", "input": items}
    body.update(top, stream=stream)
    headers = OPENAI_HEADERS if on_history else {**OPENAI_HEADERS, "session-id": "fuzz"}
    resp = target.responses(body, headers)
    not_a_proxy_failure(resp)
    if resp.status_code >= 400 and resp.headers["content-type"].startswith("application/json"):
        assert_openai_error(resp, resp.status_code)
    sessions_intact(target, before)


# -- /v1/messages -----------------------------------------------------------------------------

M = [{"role": "user", "content": "hi"}]
CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
}
ANTHROPIC_REFUSES: dict[str, dict[str, Any]] = {
    "a block that is a number": {"messages": [{"role": "user", "content": [1]}]},
    "a block without a type": {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
    "a text block without text": {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    "content that is a number": {"messages": [{"role": "user", "content": 5}]},
    "a message that is a list": {"messages": [["user", "hi"]]},
    "an unknown role": {"messages": [{"role": "wizard", "content": "x"}]},
    "no messages": {"messages": []},
    "messages is an object": {"messages": {"role": "user"}},
    "a tool_result without its tool_use": {
        "messages": [
            *M,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]},
        ]
    },
    "a tool_result in an assistant message": {
        "messages": [*M, {"role": "assistant", "content": [{"type": "tool_result"}]}]
    },
    "tool_use input that is a string": {
        "messages": [
            *M,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}],
            },
        ]
    },
    "tool_result content that is a number": {
        "messages": [
            *M,
            CALL,
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": 5}],
            },
        ]
    },
    "system is a number": {"system": 5, "messages": M},
    "system is an object": {"system": {"type": "text", "text": "x"}, "messages": M},
    "system holds strings": {"system": ["be brief"], "messages": M},
    "a system block without text": {"system": [{"type": "text"}], "messages": M},
    "a system image block": {"system": [{"type": "image", "source": {}}], "messages": M},
}


@pytest.mark.parametrize("case", list(ANTHROPIC_REFUSES))
def test_messages_malformed_bodies_are_refused_in_anthropics_shape(
    target: Target, case: str
) -> None:
    before, sent = target.states(), len(target.proxy.messages.messages_requests)
    body = {"model": MESSAGES_MODEL, "max_tokens": 64, **ANTHROPIC_REFUSES[case]}
    resp = target.messages(body)
    assert_anthropic_error(resp, 400, "invalid_request_error")
    assert len(target.proxy.messages.messages_requests) == sent  # refused by the proxy
    # The same mistake at the end of the real session's history.
    if body["messages"] and isinstance(body["messages"], list) and "system" not in body:
        resp = target.messages(target.messages_body(body["messages"]))
        assert_anthropic_error(resp, 400, "invalid_request_error")
    sessions_intact(target, before)


def test_messages_malformed_history_beside_json_the_proxy_passes_through(target: Target) -> None:
    """A body orjson cannot write back (a 70-bit integer) goes upstream as it came, but a
    history Anthropic would refuse is still refused by the proxy, in Anthropic's shape."""
    before, sent = target.states(), len(target.proxy.messages.messages_requests)
    bad = ANTHROPIC_REFUSES["a tool_result without its tool_use"]["messages"]
    body = target.messages_body(bad)
    body["metadata"] = {"user_id": "WIDE"}
    raw = orjson.dumps(body).replace(b'"WIDE"', str(2**70).encode())
    assert_anthropic_error(target.messages(raw), 400, "invalid_request_error")
    assert len(target.proxy.messages.messages_requests) == sent
    sessions_intact(target, before)


@pytest.mark.parametrize("raw", [b"{", b"[1]", b"null", b"\xff\xfe", b'"text"'])
def test_messages_bodies_that_are_no_json_object(target: Target, raw: bytes) -> None:
    assert_anthropic_error(target.messages(raw), 400, "invalid_request_error")


def test_messages_huge_body(target: Target) -> None:
    before = target.states()
    body = target.messages_body([{"role": "user", "content": "x" * (MAX_BODY + 10)}])
    assert_anthropic_error(target.messages(body), 413, "request_too_large")
    sessions_intact(target, before)


def test_messages_unknown_blocks_are_kept_verbatim(target: Target) -> None:
    block = {"type": "future_block", "payload": {"deep": [1, None]}, "cache_hint": "x"}
    before = target.states()
    resp = target.messages(target.messages_body([{"role": "user", "content": [block]}]))
    not_a_proxy_failure(resp)
    assert resp.headers["x-xun-compaction"] != "unsupported"
    last = target.proxy.messages.messages_requests[-1].json["messages"][-1]
    assert last["content"] == [block]
    sessions_intact(target, before)


block = (
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "doc"]
            )
            | json_leaf
        },
        optional={
            "text": json_leaf,
            "id": st.sampled_from(["t1", "t2"]) | json_leaf,
            "tool_use_id": st.sampled_from(["t1", "t2", "nobody"]) | json_leaf,
            "name": json_leaf,
            "input": json_value,
            "content": json_value,
            "thinking": json_leaf,
            "signature": json_leaf,
            "cache_control": st.just({"type": "ephemeral"}) | json_leaf,
        },
    )
    | json_value
)
anthropic_message = (
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system"]) | json_leaf,
            "content": st.text(max_size=10) | st.lists(block, max_size=3) | json_leaf,
        }
    )
    | json_value
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    messages=st.lists(anthropic_message, max_size=4),
    on_history=st.booleans(),
    system=st.none() | st.text(max_size=10) | st.lists(block, max_size=2) | json_leaf,
    stream=st.booleans(),
)
def test_messages_fuzz(
    target: Target, messages: list[Any], on_history: bool, system: Any, stream: bool
) -> None:
    before = target.states()
    body = (
        target.messages_body(messages)
        if on_history
        else {"model": MESSAGES_MODEL, "max_tokens": 64, "messages": messages}
    )
    if system is not None:
        body["system"] = system
    body["stream"] = stream
    headers = ANTHROPIC_HEADERS
    if not on_history:
        headers = {**ANTHROPIC_HEADERS, "x-claude-code-session-id": "fuzz"}
    resp = target.messages(body, headers)
    not_a_proxy_failure(resp)
    if resp.status_code >= 400 and resp.headers["content-type"].startswith("application/json"):
        error = resp.json()
        assert error["type"] == "error" and error["error"]["message"], error
    sessions_intact(target, before)
