"""Streaming on the compacting path: no buffering, hidden extract rounds, usage, failures."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.agent import TOOLS, Agent, ModelScript
from tests.support.fake_upstream import FakeUpstream, Reply

HEADERS = {"X-Session-Id": "stream-1", "Authorization": "Bearer sk-stream"}


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], **extra}


def compacted_agent(fake: FakeUpstream, proxy: Any, openai_client: Any) -> Agent:
    fake.default = ModelScript()
    agent = Agent(openai_client(proxy, session="stream-1", api_key="sk-stream"), output_size=2000)
    while agent.responses == [] or agent.responses[-1].headers["x-xun-compaction"] == "none":
        agent.step()
    fake.default = None
    return agent


async def test_first_chunk_arrives_before_upstream_finishes(
    fake_upstream: FakeUpstream, make_proxy: Any
) -> None:
    proxy = make_proxy()
    release = threading.Event()
    fake_upstream.push(Reply.text("first-part and the rest of the answer", hold=release))
    async with httpx.AsyncClient(timeout=10) as client:
        async with client.stream(
            "POST",
            proxy.base_url + "/chat/completions",
            json=chat_body(stream=True),
            headers=HEADERS,
        ) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            assert resp.headers["cache-control"] == "no-cache"
            assert resp.headers["x-accel-buffering"] == "no"
            assert resp.headers["x-request-id"]
            received = b""
            parts = resp.aiter_bytes()
            while b"first" not in received:
                received += await anext(parts)
            # The upstream is still holding the rest: the proxy forwarded without buffering.
            assert not fake_upstream.chat_requests[-1].completed
            release.set()
            async for part in parts:
                received += part
    assert received.endswith(b"data: [DONE]\n\n")
    assert received.count(b"[DONE]") == 1


def test_usage_chunk_only_when_the_client_asked(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy()
    client = openai_client(proxy, session="u1")
    chunks = list(client.chat.completions.create(**chat_body(stream=True)))
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ok"
    upstream_body = fake_upstream.chat_requests[-1].json
    assert upstream_body["stream_options"] == {"include_usage": True}
    chunks = list(
        client.chat.completions.create(
            **chat_body(stream=True, stream_options={"include_usage": True})
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0


def test_extract_only_round_streams_as_one_reply(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy(token_threshold=8000)
    agent = compacted_agent(fake_upstream, proxy, openai_client)
    first_tool = next(m for m in agent.messages if m["role"] == "tool")
    fake_upstream.push(
        Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": first_tool["tool_call_id"]}),
        Reply.text("Back with the original."),
    )
    before = len(fake_upstream.chat_requests)
    stream = agent.client.chat.completions.create(
        model="gpt-4o",
        messages=agent.messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Back with the original."
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert len({c.id for c in chunks}) == 1
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None
    rounds = fake_upstream.chat_requests[before:]
    assert len(rounds) == 2
    assert rounds[1].json["messages"][-1]["content"] == first_tool["content"]


def test_curl_streams_incrementally(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.text("streamed through curl", chunk_delay=0.01))
    out = subprocess.run(
        [
            "curl",
            "-sN",
            proxy.base_url + "/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-H",
            "X-Session-Id: curl-1",
            "-H",
            "Authorization: Bearer sk-curl",
            "-d",
            '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}',
        ],
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout
    events = [e for e in out.split(b"\n\n") if e]
    assert len(events) > 3 and events[-1] == b"data: [DONE]"
    assert all(e.startswith(b"data: ") for e in events)


def test_upstream_drop_mid_stream_becomes_an_error_event(
    fake_upstream: FakeUpstream, make_proxy: Any
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.text("this will be cut short", drop_after=3))
    with httpx.Client(timeout=10) as client:
        resp = client.post(
            proxy.base_url + "/chat/completions", json=chat_body(stream=True), headers=HEADERS
        )
    events = [e for e in resp.content.split(b"\n\n") if e]
    assert events[-1].startswith(b'data: {"error"')
    assert b"[DONE]" not in resp.content


async def test_client_disconnect_cancels_upstream(
    fake_upstream: FakeUpstream, make_proxy: Any
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.text("x" * 400, chunk_delay=0.05, chunk_chars=4))
    async with httpx.AsyncClient(timeout=10) as client:
        async with client.stream(
            "POST",
            proxy.base_url + "/chat/completions",
            json=chat_body(stream=True),
            headers=HEADERS,
        ) as resp:
            async for _ in resp.aiter_bytes():
                break
    started = time.monotonic()
    assert await asyncio.to_thread(fake_upstream.wait_for_disconnect, 1, 5.0)
    assert time.monotonic() - started < 2.0


async def test_async_sdk_multi_turn_stream(fake_upstream: FakeUpstream, make_proxy: Any) -> None:
    proxy = make_proxy(token_threshold=8000)
    fake_upstream.default = ModelScript()
    client = openai.AsyncOpenAI(
        base_url=proxy.base_url,
        api_key="sk-async",
        default_headers={"X-Session-Id": "a1"},
        max_retries=0,
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    compactions = []
    try:
        for turn in range(22):
            raw = await client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=messages, tools=TOOLS, stream=True
            )
            compactions.append(raw.headers["x-xun-compaction"])
            calls: dict[int, dict[str, Any]] = {}
            async for chunk in raw.parse():
                for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    slot = calls.setdefault(
                        d.index,
                        {"id": d.id, "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if d.function and d.function.name:
                        slot["function"]["name"] = d.function.name
                    if d.function and d.function.arguments:
                        slot["function"]["arguments"] += d.function.arguments
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": list(calls.values())}
            )
            for c in calls.values():
                messages.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": f"{turn % 10}" * 2000}
                )
    finally:
        await client.close()
    assert "toolcall" in compactions


@pytest.mark.parametrize("style", ["whole", "no_index", "index0"])
def test_tool_call_delta_shapes_reach_the_client_whole(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, style: str
) -> None:
    proxy = make_proxy()
    fake_upstream.push(
        Reply(
            tool_calls=[("read_file", '{"path":"a.py"}'), ("read_file", '{"path":"b.py"}')],
            tool_call_style=style,
        )
    )
    client = openai_client(proxy, session="shapes")
    with client.chat.completions.stream(
        model="gpt-4o", messages=[{"role": "user", "content": "x"}], tools=TOOLS
    ) as s:
        final = s.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [c.function.arguments for c in calls] == ['{"path":"a.py"}', '{"path":"b.py"}']


@pytest.mark.parametrize("stream", [False, True])
def test_extract_rounds_are_bounded(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, stream: bool
) -> None:
    proxy = make_proxy(token_threshold=8000, max_extract_rounds=2)
    agent = compacted_agent(fake_upstream, proxy, openai_client)
    first_tool = next(m for m in agent.messages if m["role"] == "tool")
    fake_upstream.default = lambda body: Reply.tool(
        EXTRACT_TOOL_NAME, {"toolcall_id": first_tool["tool_call_id"]}
    )
    before = len(fake_upstream.chat_requests)
    create = agent.client.chat.completions.create
    if stream:
        chunks = list(create(model="gpt-4o", messages=agent.messages, tools=TOOLS, stream=True))
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert chunks[-1].choices[0].finish_reason == "stop"
    else:
        done = create(model="gpt-4o", messages=agent.messages, tools=TOOLS)
        assert done.choices[0].message.tool_calls is None
        assert done.choices[0].finish_reason == "stop"
    assert len(fake_upstream.chat_requests) - before == 3  # the first round and two more
