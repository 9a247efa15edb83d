"""Shadow mode (issue 29), on all three wires, streamed and not.

A stateless tool session runs through a real proxy (uvicorn, the official SDK, the wire's
faithful fake) past its threshold in shadow mode, `--mode shadow` or `X-Xun-Compact:
shadow`. Every request the client sent must reach the upstream byte for byte (the bytes the
SDK wrote, captured by an httpx hook, against the bytes the fake received), on the same path
and with the client's headers, and no summary request may go upstream; the session's turn
records (admin API) must be marked `shadow` and show a projected prompt below what the
upstream billed once the session is past its threshold.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.server.app import create_app
from proxy.session.extract_tool import TOOL_DEFINITION
from proxy.store.memory import MemoryStore
from proxy.turn.shadow_turn import STAND_IN_HEAD
from proxy.wire.messages.bodies import EXTRACT_TOOL as MESSAGES_EXTRACT
from proxy.wire.responses.tool import EXTRACT_TOOL as RESPONSES_TOOL
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import SYSTEM, TOOLS, tool_output
from tests.support.claude_checks import messages_settings
from tests.support.claude_model import ReadFilesModel
from tests.support.fake_messages import FakeMessages
from tests.support.fake_responses import FILE_RE, FakeResponses, ReadFiles
from tests.support.fake_upstream import FakeUpstream, RecordedRequest, Reply
from tests.support.servers import UvicornThread

TURNS = 12
# Headers the pass-through sets itself (or drops, as hop-by-hop or the proxy's own).
NOT_FORWARDED = {"host", "content-length", "connection", "accept-encoding", "x-xun-compact"}


class Sent:
    """The requests a client's SDK wrote, as bytes (an httpx request hook)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> None:
        request.read()
        self.requests.append(request)


def check_identical(sent: Sent, received: list[RecordedRequest]) -> None:
    """Each request went upstream as the client sent it, and nothing else did."""
    assert len(received) == len(sent.requests) >= TURNS
    for client, upstream in zip(sent.requests, received, strict=True):
        assert upstream.body == client.content  # byte-identical
        assert upstream.path == client.url.path
        assert upstream.query == client.url.query.decode()
        for name, value in client.headers.items():
            if name.lower() not in NOT_FORWARDED:
                assert upstream.headers[name.lower()] == value, name


def shadow_turns(proxy_url: str, session: str) -> list[dict[str, Any]]:
    detail = httpx.get(f"{proxy_url}/admin/sessions/{session}", timeout=10).json()
    turns: list[dict[str, Any]] = detail["turns"]
    return turns


def check_projection(turns: list[dict[str, Any]], compactions: list[str], tool: Any) -> None:
    """`tool`: the wire's shape of the proxy's extract tool, which the proxy would have added
    to the client's tools from the first request on (extract_tool: always)."""
    assert len(turns) >= TURNS
    assert all(t["shadow"] is True for t in turns)
    assert all(isinstance(t["projected_prompt_tokens"], int) for t in turns)
    assert "toolcall" in compactions or "summary" in compactions, compactions
    last = turns[-1]
    assert last["prompt_tokens"] > 0  # the usage of the client's own request, as billed
    saved = last["prompt_tokens"] - last["projected_prompt_tokens"]
    assert saved > 0, last
    # Before the threshold, nothing would have changed but the proxy's tool: the projection is
    # the bill and the tool's definition (as the proxy estimates it), near enough.
    first = turns[0]
    added = len(orjson.dumps(tool)) // 4
    assert abs(first["projected_prompt_tokens"] - added - first["prompt_tokens"]) <= (
        first["prompt_tokens"] * 0.05 + 8
    )


# -- Chat Completions ----------------------------------------------------------------------


def read_next(body: dict[str, Any]) -> Reply:
    turn = sum(1 for m in body["messages"] if m.get("role") == "tool") + 1
    return Reply.tool("read_file", {"path": f"src/file_{turn}.py"}, content="Reading.")


def chat_turn(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> str:
    kwargs: dict[str, Any] = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
    if stream:
        kwargs["stream_options"] = {"include_usage": True}
    raw = client.chat.completions.with_raw_response.create(stream=stream, **kwargs)
    if stream:
        calls: dict[int, dict[str, Any]] = {}
        for chunk in raw.parse():
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": tc.id, "arguments": ""})
                    slot["name"] = slot.get("name") or tc.function.name
                    slot["arguments"] += tc.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": "Reading."}
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls.values()
        ]
    else:
        message = raw.parse().choices[0].message.model_dump(exclude_none=True)
    messages.append(message)
    for call in message["tool_calls"]:
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": tool_output(len(messages), 2000),
            }
        )
    return raw.headers["x-xun-shadow"]


@pytest.mark.parametrize("by", ["mode", "header"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_completions_shadow(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
    by: str,
) -> None:
    fake_upstream.default = read_next
    mode = "shadow" if by == "mode" else "compact"
    proxy = make_proxy(token_threshold=3000, toolcall_keep_max=2, mode=mode)
    sent = Sent()
    headers = {"X-Xun-Compact": "shadow"} if by == "header" else {}
    client = openai_client(
        proxy,
        session=f"shadow-chat-{stream}-{by}",
        default_headers=headers,
        http_client=openai.DefaultHttpxClient(event_hooks={"request": [sent]}),
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read the source files one by one."},
    ]
    compactions = [chat_turn(client, messages, stream) for _ in range(TURNS)]
    proxy.settle()
    check_identical(sent, fake_upstream.requests)
    turns = shadow_turns(proxy.url, only_session(proxy.url))
    check_projection(turns, compactions, TOOL_DEFINITION)
    metrics = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    assert 'level="toolcall",outcome="success",trigger="shadow",wire="chat"' in metrics
    assert 'trigger="auto"' not in metrics  # projected, never counted as done
    check_savings_report(proxy.url, turns)
    assert "xun_prompt_tokens_saved_total{" not in metrics  # no real saving was made


def check_savings_report(proxy_url: str, turns: list[dict[str, Any]]) -> None:
    """The savings report puts the session's shadow turns in `projected` only: the bills
    of the client's own requests against what the proxy would have sent."""
    report = httpx.get(f"{proxy_url}/admin/savings?by=session", timeout=10).json()
    assert report["totals"]["requests"] == 0 and report["totals"]["tokens_saved"] == 0
    projected = report["projected"]
    assert projected["requests"] == len(turns)
    assert projected["prompt_tokens_direct"] == sum(t["prompt_tokens"] for t in turns)
    assert projected["prompt_tokens_projected"] == sum(t["projected_prompt_tokens"] for t in turns)
    assert projected["tokens_saved"] > 0
    (group,) = report["groups"]
    assert group["projected"] == projected


def only_session(proxy_url: str) -> str:
    """The id of the proxy's one session (its shadow state)."""
    sessions = httpx.get(f"{proxy_url}/admin/sessions", timeout=10).json()["data"]
    (found,) = sessions
    ident: str = found["id"]
    return ident


def test_off_beats_shadow_mode(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """`X-Xun-Compact: off` on a shadowing proxy: the compacting path, compaction off."""
    fake_upstream.default = read_next
    proxy = make_proxy(mode="shadow")
    client = openai_client(proxy, default_headers={"X-Xun-Compact": "off"})
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-xun-compaction"] == "none"
    assert "x-xun-shadow" not in raw.headers


# -- Responses -----------------------------------------------------------------------------

READ_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_shadow(
    make_proxy: MakeProxy, openai_client: OpenAIClientFactory, stream: bool
) -> None:
    with FakeResponses() as fake:
        fake.policy = ReadFiles(TURNS + 5, tool="read_file")
        proxy = make_proxy(
            token_threshold=3000, upstream_base_url=fake.url, toolcall_keep_max=2, mode="shadow"
        )
        sent = Sent()
        client = openai_client(
            proxy,
            session=f"shadow-responses-{stream}",
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [sent]}),
        )
        items: list[dict[str, Any]] = [
            {"role": "developer", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Read file_1.txt, file_2.txt, ... one by one."},
        ]
        compactions = []
        for _ in range(TURNS):
            raw = client.responses.with_raw_response.create(
                model="gpt-4.1",
                input=items,  # type: ignore[arg-type]
                tools=[READ_TOOL],  # type: ignore[list-item]
                store=False,
                include=["reasoning.encrypted_content"],
                stream=stream,
            )
            if stream:
                events = list(raw.parse())  # type: ignore[call-overload]
                response = next(e.response for e in events if e.type == "response.completed")
            else:
                response = raw.parse()
            compactions.append(raw.headers["x-xun-shadow"])
            for item in response.output:
                items.append(item.model_dump(exclude_none=True))
                if item.type == "function_call":
                    n = int(FILE_RE.search(item.arguments).group(1))  # type: ignore[union-attr]
                    output = f"file {n}\n" + "line: x\n" * 120
                    items.append(
                        {"type": "function_call_output", "call_id": item.call_id, "output": output}
                    )
        proxy.settle()
        check_identical(sent, fake.requests)
        turns = shadow_turns(proxy.url, only_session(proxy.url))
        check_projection(turns, compactions, RESPONSES_TOOL)


# -- Anthropic Messages --------------------------------------------------------------------

MESSAGES_TOOL = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_shadow(stream: bool) -> None:
    paths = [f"src/file_{n:02d}.py" for n in range(1, TURNS + 5)]
    with FakeMessages() as fake:
        fake.policy = ReadFilesModel(paths, tool="read_file", path_key="path", extracts=0)
        settings = messages_settings(fake, token_threshold=4000, toolcall_keep_max=2, mode="shadow")
        sent = Sent()
        seen: list[str] = []

        def note(response: httpx.Response) -> None:
            seen.append(response.headers["x-xun-shadow"])

        hooks: dict[str, Any] = {"request": [sent], "response": [note]}
        with (
            UvicornThread(create_app(settings)) as proxy,
            anthropic.Anthropic(
                base_url=proxy.url,
                api_key="sk-ant-test",
                max_retries=0,
                default_headers={"X-Session-Id": f"shadow-messages-{stream}"},
                http_client=anthropic.DefaultHttpxClient(event_hooks=hooks),
            ) as client,
        ):
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
            for _ in range(TURNS):
                args: dict[str, Any] = {
                    "model": "claude-opus-4-8",
                    "max_tokens": 4096,
                    "system": "You are a careful coding agent.",
                    "tools": [MESSAGES_TOOL],
                    "thinking": {"type": "enabled", "budget_tokens": 2048},
                    "messages": messages,
                }
                if stream:
                    with client.messages.stream(**args) as events:
                        reply = events.get_final_message()
                else:
                    reply = client.messages.create(**args)
                messages.append(
                    {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
                )
                results = [
                    {"type": "tool_result", "tool_use_id": b.id, "content": "x = 1\n" * 400}
                    for b in reply.content
                    if b.type == "tool_use"
                ]
                assert results
                messages.append({"role": "user", "content": results})
            proxy.settle()
            check_identical(sent, fake.requests)
            turns = shadow_turns(proxy.url, only_session(proxy.url))
            check_projection(turns, seen, MESSAGES_EXTRACT)


def test_a_shadow_summary_is_a_stand_in_never_asked_upstream(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """Past two level-1 rounds the seed's rules summarise: in shadow mode the summary is a
    stand-in of a summary's size, and no summary request reaches the upstream."""
    fake_upstream.default = read_next
    proxy = make_proxy(token_threshold=3000, toolcall_keep_max=2, mode="shadow")
    sent = Sent()
    client = openai_client(
        proxy,
        session="shadow-summary",
        http_client=openai.DefaultHttpxClient(event_hooks={"request": [sent]}),
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    compactions = [chat_turn(client, messages, stream=False) for _ in range(TURNS * 2)]
    proxy.settle()
    assert "summary" in compactions, compactions
    check_identical(sent, fake_upstream.requests)
    detail = httpx.get(f"{proxy.url}/admin/sessions/{only_session(proxy.url)}", timeout=10).json()
    assert detail["summary"].startswith(STAND_IN_HEAD)
    summarised = [t for t in detail["turns"] if t["compaction"] == "summary"]
    assert summarised and all(t["projected_prompt_tokens"] < t["prompt_tokens"] for t in summarised)


class BrokenStore(MemoryStore):
    """A store that fails in a way the session turn does not expect."""

    async def get(self, key: Any) -> Any:
        raise RuntimeError("the disk is on fire")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_failing_shadow_leaves_a_plain_pass_through(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
) -> None:
    fake_upstream.default = read_next
    proxy = make_proxy(mode="shadow", store=BrokenStore())
    sent = Sent()
    client = openai_client(
        proxy, http_client=openai.DefaultHttpxClient(event_hooks={"request": [sent]})
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=messages, tools=TOOLS, stream=stream
        )
        assert raw.status_code == 200 and "x-xun-shadow" not in raw.headers
        if stream:
            assert [c for c in raw.parse() if c.choices]  # the stream came back whole
        else:
            assert raw.parse().choices[0].message.tool_calls
        messages.append({"role": "user", "content": "Go on."})
    assert len(fake_upstream.requests) == len(sent.requests) == 3
    for client_request, upstream in zip(sent.requests, fake_upstream.requests, strict=True):
        assert upstream.body == client_request.content


def test_a_gzip_body_goes_up_as_it_came_and_is_still_shadowed(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """The compressed bytes and their Content-Encoding pass through (the fake, which reads
    no gzip, refuses them: its answer comes back as it is); the shadow read the decoded body
    (its x-xun-shadow), and records nothing for a refused request."""
    fake_upstream.default = read_next
    proxy = make_proxy(mode="shadow")
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * 50}]})
    packed = gzip.compress(body.encode())
    headers = {
        "authorization": "Bearer sk-test",
        "content-type": "application/json",
        "content-encoding": "gzip",
        "x-session-id": "shadow-gzip",
    }
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=packed, headers=headers)
    assert answer.headers["x-xun-shadow"] == "none"
    (upstream,) = fake_upstream.requests
    assert upstream.body == packed and upstream.headers["content-encoding"] == "gzip"
    assert answer.status_code == 400 and "error" in answer.json()  # the fake's own answer
    proxy.settle()
    session = httpx.get(f"{proxy.url}/admin/sessions/{answer.headers['x-xun-session']}")
    assert session.status_code == 404  # nothing saved for a refused request


def test_a_stream_without_usage_is_recorded_with_its_projection_only(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """Chat Completions streams carry usage only when the client asks for it, and shadow mode
    adds nothing to the request: the turn has its projection and no billed usage."""
    fake_upstream.default = read_next
    proxy = make_proxy(mode="shadow")
    client = openai_client(proxy, session="shadow-no-usage")
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, stream=True
    )
    assert all(chunk.usage is None for chunk in raw.parse())
    assert "stream_options" not in fake_upstream.requests[-1].json
    proxy.settle()
    (turn,) = shadow_turns(proxy.url, raw.headers["x-xun-session"])
    assert turn["prompt_tokens"] is None and turn["projected_prompt_tokens"] > 0
