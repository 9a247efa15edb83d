"""Issue 13, the data, state and upstream-reply findings (1, 4, 5, 6, 12, 13, 14).

Each test writes down the adversarial reproduction that broke the proxy before its fix:
tenants that collapsed without `Authorization`, hidden extract calls re-inserted into another
history, deep JSON and wide integers on the compacting path, upstream replies of the wrong
shape, a usage value that poisoned its session, a session over the threshold that queued its
requests for a lease it did not need, a turn record lost under concurrency, and the smaller
things (admin's hidden count, UTF-8 session ids, a JSON answer to a stream request).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.compaction.cache_aware import CacheAwareCompactor
from proxy.session.identity import tenant_of
from proxy.session.rebuild import rebuild, record_turn
from proxy.session.state import HiddenExtract, SessionState, add_hidden
from proxy.store import SessionKey
from proxy.store.memory import MemoryStore
from tests.conftest import MakeProxy
from tests.reliability.rawupstream import chunk, completion, sse
from tests.scale.script import NumberedModel, read_state, session_key
from tests.scale.test_concurrency import WARM_TURNS, burst, warm_up
from tests.support.fake_upstream import FakeUpstream, Reply, count_prompt_tokens
from tests.support.servers import UvicornThread

URL = "/v1/chat/completions"
HELLO = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}


class ScriptedUpstream:
    """An upstream that answers each chat request with exactly the bytes it is given."""

    def __init__(self) -> None:
        self.replies: deque[tuple[int, str, bytes]] = deque()
        self.bodies: list[bytes] = []
        self.server = UvicornThread(Starlette(routes=[Route(URL, self._chat, methods=["POST"])]))

    @property
    def url(self) -> str:
        return self.server.url + "/v1"

    def push(self, body: bytes | Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append((200, content_type, data))

    async def _chat(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        if self.replies:
            status, content_type, data = self.replies.popleft()
        else:
            status, content_type, data = 200, "application/json", json.dumps(completion("ok"))
            data = data.encode()
        return Response(data, status_code=status, media_type=content_type)


@pytest.fixture
def scripted() -> Iterator[ScriptedUpstream]:
    upstream = ScriptedUpstream()
    upstream.server.start()
    try:
        yield upstream
    finally:
        upstream.server.stop()


def is_openai_error(response: httpx.Response, status: int, code: str | None = None) -> bool:
    error = response.json().get("error")
    return (
        response.status_code == status
        and isinstance(error, dict)
        and {"message", "type", "param", "code"} <= set(error)
        and (code is None or error["code"] == code)
    )


def data_events(content: bytes) -> list[Any]:
    out: list[Any] = []
    for event in content.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            text = b"\n".join(data)
            out.append(text.decode() if text == b"[DONE]" else json.loads(text))
    return out


# -- 1. tenants and hidden extract calls --------------------------------------------------


def test_every_credential_header_is_its_own_tenant(
    make_proxy: MakeProxy, fake_upstream: FakeUpstream
) -> None:
    """Before: x-api-key and api-key requests, keyed or not, all shared the tenant
    "anonymous", so two keys with one session id shared one session."""
    # x-api-key requests are Anthropic's and go to its upstream (issue 26, item 2): here the
    # same fake, which answers Chat Completions as Anthropic's OpenAI compatibility does.
    proxy = make_proxy(anthropic_base_url=fake_upstream.base_url)

    def session_of(headers: dict[str, str]) -> str:
        headers = {"x-session-id": "shared", **headers}
        response = httpx.post(proxy.url + URL, json=HELLO, headers=headers, timeout=10)
        assert response.status_code == 200
        return response.headers["x-xun-session"]

    ids = {
        "x-api-key A": session_of({"x-api-key": "sk-ant-a"}),
        "x-api-key B": session_of({"x-api-key": "sk-ant-b"}),
        "api-key A": session_of({"api-key": "azure-a"}),
        "api-key B": session_of({"api-key": "azure-b"}),
        "same value, other header": session_of({"api-key": "sk-ant-a"}),
        "authorization": session_of({"authorization": "Bearer sk-a"}),
        "none": session_of({}),
    }
    assert len(set(ids.values())) == len(ids), ids
    # The same credential is the same tenant; Authorization comes first, then x-api-key.
    assert session_of({"x-api-key": "sk-ant-a"}) == ids["x-api-key A"]
    both = {"authorization": "Bearer sk-a", "x-api-key": "sk-ant-b"}
    assert session_of(both) == ids["authorization"]
    assert session_of({"x-api-key": "sk-ant-a", "api-key": "azure-b"}) == ids["x-api-key A"]
    # No keyed credential hashes to the tenant of requests without one (a hash is 16 hex
    # digits), and Authorization hashes as it did before the other headers counted.
    assert tenant_of({}) == tenant_of({"x-api-key": ""}) == tenant_of(None) == "anonymous"
    keyed = [tenant_of({name: "anonymous"}) for name in ("authorization", "x-api-key", "api-key")]
    assert all(len(t) == 16 and set(t) <= set("0123456789abcdef") for t in keyed)
    assert tenant_of({"authorization": "Bearer sk-a"}) == tenant_of("Bearer sk-a")


CALL = {"type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
EXTRACT = {
    "id": "ext1",
    "type": "function",
    "function": {"name": "extract_compacted_tool_result", "arguments": '{"toolcall_id": "c0"}'},
}
# The proxy's answer to EXTRACT in client A's history: the original of `c0` (answers are
# stored as references and re-derived from the client's messages).
SECRET_RESULT = {"role": "tool", "tool_call_id": "ext1", "content": "client A: " + "x" * 500}


def _history(user: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": user},
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "c0"}]},
        {"role": "tool", "tool_call_id": "c0", "content": f"{user}: " + "x" * 500},
    ]


def _with_reply(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history, the assistant reply the client saw (own call `own1`) and its result."""
    return [
        *history,
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "own1"}]},
        {"role": "tool", "tool_call_id": "own1", "content": "result"},
    ]


def _state_with_hidden(history: list[dict[str, Any]]) -> SessionState:
    """A's turn: the model mixed an extract call with its own call; the proxy hid it."""
    rb = rebuild(history, None)
    add_hidden(rb.state, len(history), [{**CALL, "id": "own1"}], [EXTRACT], [SECRET_RESULT])
    return SessionState.from_bytes(record_turn(rb, total_tokens=100).to_bytes())


def test_hidden_extract_calls_go_back_only_into_the_history_they_were_recorded_in() -> None:
    """Before: hidden calls kept across a divergence were re-inserted wherever the same call
    id sat at the same index, so one client's reclaimed result reached another's request."""
    state = _state_with_hidden(_history("client A"))
    # Client A carries on: its hidden exchange goes back in.
    own = SessionState.from_bytes(state.to_bytes())
    sent = rebuild(_with_reply(_history("client A")), own).upstream_messages()
    assert SECRET_RESULT in sent
    # Client B (another history) reuses the call id `own1` at the same index.
    other = SessionState.from_bytes(state.to_bytes())
    sent = rebuild(_with_reply(_history("client B")), other).upstream_messages()
    assert SECRET_RESULT not in sent
    assert SECRET_RESULT["content"] not in json.dumps(sent)
    assert all(c["id"] != "ext1" for m in sent for c in m.get("tool_calls") or [])
    # Pinned on A's next turn, the exchange still only matches A's history.
    pinned = SessionState.from_bytes(state.to_bytes())
    after = rebuild(_with_reply(_history("client A")), pinned)
    assert after.state.hidden and after.state.hidden[0].fingerprint is not None
    kept = SessionState.from_bytes(after.state.to_bytes())
    assert SECRET_RESULT not in rebuild(_with_reply(_history("client B")), kept).upstream_messages()


def test_hidden_calls_saved_before_fingerprints_are_dropped() -> None:
    state = _state_with_hidden(_history("client A")).to_dict()
    for entry in state["hidden"]:  # as a state saved before the fingerprint fields
        del entry["before"], entry["fingerprint"]
    old = SessionState.from_dict(state)
    sent = rebuild(_with_reply(_history("client A")), old).upstream_messages()
    assert SECRET_RESULT not in sent


def test_a_hidden_call_without_a_record_is_not_vouched_for_by_the_request_that_saves_it() -> None:
    """An entry with no record of its history (an older version's, merged in from another
    writer) that sits where this request's messages end is not sealed with this history."""
    history = _history("client B")
    rb = rebuild(history, None)
    rb.state.hidden.append(HiddenExtract(len(history), ["own1"], [EXTRACT], [SECRET_RESULT]))
    state = SessionState.from_bytes(record_turn(rb, total_tokens=100).to_bytes())
    assert SECRET_RESULT not in rebuild(_with_reply(history), state).upstream_messages()


# -- 4. deep nesting on the compacting path -----------------------------------------------


@pytest.mark.parametrize("depth", [254, 600, 1022])
def test_deep_nesting_never_fails_the_request(
    make_proxy: MakeProxy, scripted: ScriptedUpstream, depth: int
) -> None:
    """Before: orjson read the body (up to 1024 levels) but could not write it back (254):
    500. Now the body goes upstream as sent, uncompacted (or is refused with a 400)."""
    proxy = make_proxy(upstream_base_url=scripted.url)
    raw = json.dumps(HELLO)[:-1].encode() + b', "metadata": ' + b"[" * depth + b"]" * depth + b"}"
    response = httpx.post(
        proxy.url + URL, content=raw, headers={"x-session-id": "deep"}, timeout=10
    )
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert is_openai_error(response, 400)
    else:
        assert scripted.bodies[-1] == raw


# -- 5. upstream replies of the wrong shape ------------------------------------------------

WRONG_REPLIES = {
    "a list": [1, 2],
    "choices [null]": {"choices": [None]},
    "choices a string": {"choices": "abc"},
    "message a string": {"choices": [{"index": 0, "message": "hi", "finish_reason": "stop"}]},
    "usage a string": {**completion("hi"), "usage": "lots"},
    "tool_calls [1]": {
        "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [1]}}]
    },
}


@pytest.mark.parametrize("reply", WRONG_REPLIES.values(), ids=WRONG_REPLIES.keys())
def test_wrong_typed_completion_is_a_502_in_openai_shape(
    make_proxy: MakeProxy, scripted: ScriptedUpstream, reply: Any
) -> None:
    """Before: each of these gave a generic 500."""
    proxy = make_proxy(upstream_base_url=scripted.url)
    scripted.push(reply)
    response = httpx.post(proxy.url + URL, json=HELLO, headers={"x-session-id": "s"}, timeout=10)
    passed_unchanged = response.status_code == 200 and response.json() == reply
    assert passed_unchanged or is_openai_error(response, 502, "upstream_invalid_response")
    # The session is not harmed: the next request goes through.
    response = httpx.post(proxy.url + URL, json=HELLO, headers={"x-session-id": "s"}, timeout=10)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]


WRONG_CHUNKS = {
    "choices a string": {"choices": "abc"},
    "choices [1]": {"choices": [1]},
    "delta a string": {"choices": [{"index": 0, "delta": "x"}]},
    "tool_calls [1]": {"choices": [{"index": 0, "delta": {"tool_calls": [1]}}]},
    "function a string": {
        "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]
    },
}


@pytest.mark.parametrize("bad", WRONG_CHUNKS.values(), ids=WRONG_CHUNKS.keys())
def test_wrong_typed_stream_chunk_ends_with_an_error_event(
    make_proxy: MakeProxy, scripted: ScriptedUpstream, bad: dict[str, Any]
) -> None:
    """Before: the stream was cut with no error event and no [DONE]."""
    proxy = make_proxy(upstream_base_url=scripted.url)
    stream = sse(chunk("Hello")) + sse(bad) + sse(chunk(" world", finish="stop")) + sse("[DONE]")
    scripted.push(stream, "text/event-stream")
    response = httpx.post(
        proxy.url + URL, json={**HELLO, "stream": True}, headers={"x-session-id": "s"}, timeout=10
    )
    assert response.status_code == 200
    events = data_events(response.content)
    assert events[0]["choices"][0]["delta"]["content"] == "Hello", events
    passed = bad in events and events[-1] == "[DONE]"
    ended_with_error = "[DONE]" not in events and isinstance(events[-1].get("error"), dict)
    assert passed or ended_with_error, events


def test_a_json_answer_to_a_stream_request_becomes_one_chunk(
    make_proxy: MakeProxy, scripted: ScriptedUpstream
) -> None:
    """Before: the JSON went to the client inside the event stream, as garbage, then [DONE]."""
    proxy = make_proxy(upstream_base_url=scripted.url)
    scripted.push(completion("all at once"))
    response = httpx.post(
        proxy.url + URL,
        json={**HELLO, "stream": True, "stream_options": {"include_usage": True}},
        headers={"x-session-id": "s"},
        timeout=10,
    )
    assert response.status_code == 200
    # Converted: the client asked for a stream and gets one, never the JSON as it came.
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    events = data_events(response.content)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e.get("choices")]
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["all at once"]
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert events[-2]["usage"]["total_tokens"] == 7
    # The client's SDK reads it as a normal stream.
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-x", max_retries=0)
    scripted.push(completion("again"))
    with client:
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                extra_headers={"x-session-id": "s2"},
            )
            if c.choices
        )
    assert text == "again"


# -- 6. usage values ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["12", True, -5, 1.5, None, [3]])
def test_a_bad_usage_value_is_ignored_for_its_turn(
    make_proxy: MakeProxy, scripted: ScriptedUpstream, bad: Any
) -> None:
    """Before: after one reply with `usage.total_tokens: "12"`, every later request of the
    session failed to prepare (`degraded: prepare_failed`) and was never saved again."""
    proxy = make_proxy(upstream_base_url=scripted.url)
    reply = completion("first")
    reply["usage"] = {"prompt_tokens": bad, "completion_tokens": 2, "total_tokens": bad}
    scripted.push(reply)
    headers = {"x-session-id": "usage", "authorization": "Bearer sk-u"}
    first = [{"role": "user", "content": "one"}]
    assert httpx.post(
        proxy.url + URL, json={**HELLO, "messages": first}, headers=headers, timeout=10
    ).is_success
    second = [*first, {"role": "assistant", "content": "first"}, {"role": "user", "content": "2"}]
    assert httpx.post(
        proxy.url + URL, json={**HELLO, "messages": second}, headers=headers, timeout=10
    ).is_success
    key = SessionKey(tenant_of("Bearer sk-u"), "usage")
    proxy.settle()
    state, _ = asyncio.run(read_state("memory://", key, proxy.app.state.store))
    assert state.total_tokens == 7  # the second reply's usage, a sound one
    assert [t["total_tokens"] for t in state.turns] == [None, 7]
    assert [t["prompt_tokens"] for t in state.turns] == [None, 5]


@pytest.mark.parametrize("bad", ["12", True, -5, 1.5, [3], {"n": 1}])
def test_record_turn_never_stores_a_usage_value_that_is_not_a_count(bad: Any) -> None:
    """The reproduction at the level of the session state: `"12"` was stored as the session's
    size, and the next request's projection (`"12" + int`) raised."""
    messages = [{"role": "user", "content": "one"}]
    state = record_turn(
        rebuild(messages, None), total_tokens=bad, prompt_tokens=bad, cached_tokens=bad
    )
    assert state.total_tokens is None
    assert state.turns[-1] | {"at": 0} == {
        "at": 0,
        "messages": 1,
        "total_tokens": None,
        "prompt_tokens": None,
        "cached_tokens": None,
        "compaction": "none",
    }
    follow = [*messages, {"role": "assistant", "content": "a"}, {"role": "user", "content": "2"}]
    assert rebuild(follow, SessionState.from_bytes(state.to_bytes())).projected_tokens() > 0


def test_a_bad_total_stored_before_the_check_is_dropped_on_load() -> None:
    state = SessionState(total_tokens=12).to_dict()
    state["total_tokens"] = "12"
    assert SessionState.from_dict(state).total_tokens is None


# -- 12. a session over the threshold that is not compacted takes no lease -----------------


class CountingStore(MemoryStore):
    """The memory store, counting the compaction leases asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.acquired = 0

    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        self.acquired += 1
        return await super().acquire(key, ttl_s)


class CachingModel(NumberedModel):
    """The numbered model, reporting that the provider served 95 % of each prompt from its
    cache (as a real one does for an append-only session): a rewrite then has a price."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = super().__call__(body)
        cached = int(count_prompt_tokens(body) * 0.95)
        reply.usage_override = {"prompt_tokens_details": {"cached_tokens": cached}}
        return reply


@dataclass
class PatientCompactor(CacheAwareCompactor):
    """The cost-aware strategy, waiting for ever (short of the model's window): a session over
    the threshold that it declines to compact, however many requests arrive at once."""

    patience: float = 1e12


async def test_a_session_the_strategy_declines_to_compact_takes_no_lease(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """Before: each request of a session over the threshold took the session's lease and
    polled for it, though the cost-aware strategy compacted nothing: 10 parallel requests
    took 1.35 s, 50 took 11.6 s. Now no lease is asked for when nothing will be compacted."""
    store = CountingStore()
    fake_upstream.default = CachingModel()
    compactor = f"{__name__}:PatientCompactor"
    proxy = make_proxy(store=store, compactor=compactor, token_threshold=8000)
    session = "declined"
    agent = await asyncio.to_thread(warm_up, proxy, session)
    proxy.settle()
    state, _ = await read_state("memory://", session_key(session), store)
    assert state.total_tokens is not None and state.total_tokens > 8000
    assert store.acquired == 0  # the warm-up ran with a huge threshold

    responses = await burst(proxy, session, [list(agent.messages) for _ in range(16)])

    assert [r.status_code for r in responses] == [200] * 16
    assert {r.headers["x-xun-compaction"] for r in responses} == {"none"}
    assert store.acquired == 0
    proxy.settle()
    state, _ = await read_state("memory://", session_key(session), store)
    assert state.accrued > 0  # the strategy noted what waiting cost, without the lease
    assert len(state.turns) == WARM_TURNS + 16


# -- 13. every answered turn is recorded --------------------------------------------------


async def test_fifty_identical_requests_leave_fifty_turn_records(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Before: 50 identical concurrent requests that triggered one summary left 49 turn
    records (SQLite: each save gave up after 10 lost compare-and-set rounds)."""
    fake_upstream.default = NumberedModel(summary_delay=0.3)
    url = f"sqlite:///{tmp_path / 'turns.db'}"
    proxy = make_proxy(store_url=url, token_threshold=8000, escalation_rounds=0)
    agent = await asyncio.to_thread(warm_up, proxy, "fifty")

    responses = await burst(proxy, "fifty", [list(agent.messages) for _ in range(50)])

    assert [r.status_code for r in responses] == [200] * 50
    assert sorted(r.headers["x-xun-compaction"] for r in responses).count("summary") == 1
    proxy.settle()
    state, _ = await read_state(url, session_key("fifty"))
    assert len(state.turns) == WARM_TURNS + 50
    assert sum(t["compaction"] == "summary" for t in state.turns) == 1


# -- 14. smaller things -------------------------------------------------------------------


async def test_admin_detail_counts_the_stored_hidden_calls(make_proxy: MakeProxy) -> None:
    """Before: the detail said `hidden: 0` while the stored state held 1 (the rebuild for
    the view dropped the call whose anchor the client has not sent back yet)."""
    proxy = make_proxy()
    history = _history("client A")
    state = _state_with_hidden(history)
    key = SessionKey("tenant", "with-hidden")
    store = proxy.app.state.store
    await store.put(key, state.to_bytes(), state.meta(len(history)), expected_version=None)
    detail = await asyncio.to_thread(httpx.get, f"{proxy.url}/admin/sessions/{key.id}", timeout=10)
    assert detail.status_code == 200
    assert detail.json()["state"]["hidden"] == 1


@pytest.fixture
def redis_url() -> Iterator[str]:
    prefix = f"xunfind:{uuid.uuid4().hex}:"
    yield f"redis://127.0.0.1:6379/13?prefix={prefix}"
    client = redis.Redis(host="127.0.0.1", port=6379, db=13)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def test_utf8_session_ids_read_as_sent(make_proxy: MakeProxy, redis_url: str) -> None:
    """Before: header bytes were read as latin-1, so `été-日本` showed as `Ã©tÃ©-æ\x97¥æ\x9c¬`
    in the admin API and in Redis keys."""
    proxy = make_proxy(store_url=redis_url)
    session = "été-日本"
    response = httpx.post(
        proxy.url + URL,
        json=HELLO,
        headers={"x-session-id": session.encode(), "authorization": "Bearer sk-utf8"},
        timeout=10,
    )
    assert response.status_code == 200
    rows = httpx.get(proxy.url + "/admin/sessions", timeout=10).json()["data"]
    assert [row["session"] for row in rows] == [session]
    assert response.headers["x-xun-session"] == SessionKey(tenant_of("Bearer sk-utf8"), session).id
    prefix = redis_url.split("prefix=")[1]
    client = redis.Redis(host="127.0.0.1", port=6379, db=13)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
    finally:
        client.close()
    assert [k for k in keys if session.encode() in k], keys  # the id as sent, in UTF-8
    assert not [k for k in keys if "Ã".encode() in k or b"%C3" in k]


def test_wide_integers_reach_the_upstream_exactly(
    make_proxy: MakeProxy, fake_upstream: FakeUpstream
) -> None:
    """Before: orjson read integers outside -2**63..2**64-1 as floats, so the upstream got
    `1.2345678901234568e+20` for `123456789012345678901`."""
    proxy = make_proxy()
    raw = (
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], '
        b'"metadata": {"wide": 123456789012345678901, "low": -9223372036854775809}, '
        b'"seed": 18446744073709551615}'
    )
    response = httpx.post(proxy.url + URL, content=raw, headers={"x-session-id": "w"}, timeout=10)
    assert response.status_code == 200
    sent = fake_upstream.chat_requests[-1].body
    assert b"123456789012345678901" in sent and b"-9223372036854775809" in sent
    assert b"e+" not in sent
    # An integer orjson can hold still takes the compacting path.
    ok = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "seed": '
    ok += b"18446744073709551615}"
    response = httpx.post(proxy.url + URL, content=ok, headers={"x-session-id": "w2"}, timeout=10)
    assert response.status_code == 200 and "x-xun-session" in response.headers
    assert b"18446744073709551615" in fake_upstream.chat_requests[-1].body
