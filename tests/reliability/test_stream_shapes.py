"""What real servers stream, on both paths: malformed SSE, comments, keep-alives, and the
tool-call delta shapes (whole, split, no index, parallel calls reusing index 0).

Pass-through relays every byte as sent. The compacting path parses the stream, so it must
tolerate the odd parts and give the client each tool call whole, including in a compacted
session where the proxy's own extract tool is injected and filtered out.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import MakeProxy
from tests.reliability.conftest import compacted_agent
from tests.reliability.rawupstream import chunk, sse
from tests.support.agent import TOOLS
from tests.support.fake_upstream import FakeUpstream, Reply

URL = "/chat/completions"
PATHS = {
    "pass-through": {"authorization": "Bearer sk-shapes"},
    "compacting": {"authorization": "Bearer sk-shapes", "x-session-id": "shapes-1"},
}
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "stream": True}
STYLES = ["split", "whole", "no_index", "index0"]


def data_events(content: bytes) -> list[Any]:
    """The JSON payloads of the data events (comments and non-JSON data skipped)."""
    out = []
    for event in content.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                try:
                    out.append(json.loads(line[5:]))
                except ValueError:
                    pass
    return out


def text_of(content: bytes) -> str:
    return "".join(
        (c["choices"][0]["delta"].get("content") or "")
        for c in data_events(content)
        if isinstance(c, dict) and c.get("choices")
    )


def calls_by_index(content: bytes) -> dict[int, dict[str, str]]:
    """Accumulate tool-call deltas the way OpenAI clients do: by `index`."""
    calls: dict[int, dict[str, str]] = {}
    for payload in data_events(content):
        if not isinstance(payload, dict) or not payload.get("choices"):
            continue
        for delta in payload["choices"][0]["delta"].get("tool_calls") or []:
            slot = calls.setdefault(delta["index"], {"id": "", "name": "", "arguments": ""})
            slot["id"] = delta.get("id") or slot["id"]
            function = delta.get("function") or {}
            slot["name"] = function.get("name") or slot["name"]
            slot["arguments"] += function.get("arguments") or ""
    return calls


MESSY = [
    b": keep-alive\n\n",
    sse(chunk("") | {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
    b"data: {this is not json\n\n",
    b"event: ping\ndata: {}\n\n",
    b"retry: 1000\nid: 7\n\n",
    sse(chunk("Hel")).replace(b"\n\n", b"\r\n\r\n"),  # CRLF framing
    b":\n\n",
    sse(chunk("lo, "))[:17],  # one event split across two network writes
    sse(chunk("lo, "))[17:],
    b"data: " + json.dumps(chunk("world")).encode() + b"\n",  # data line, then blank line later
    b"\n",
    sse(chunk("", finish="stop")),
    b"data: [DONE]\n\n",
]


@pytest.mark.parametrize("path", list(PATHS))
def test_malformed_sse_and_comments_are_tolerated(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, path: str
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply(raw_stream=MESSY))
    response = httpx.post(proxy.base_url + URL, json=BODY, headers=PATHS[path], timeout=10)
    assert response.status_code == 200
    if path == "pass-through":
        assert response.content == b"".join(MESSY)
    else:
        assert b"keep-alive" in response.content  # comments pass
        assert response.content.endswith(b"data: [DONE]\n\n")
        assert response.content.count(b"[DONE]") == 1
        assert b'"error"' not in response.content
    assert text_of(response.content) == "Hello, world"


@pytest.mark.parametrize("path", list(PATHS))
def test_keepalive_comments_between_events(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: Any, path: str
) -> None:
    proxy = make_proxy()
    fake_upstream.push(Reply.text("kept alive all the way", keepalive="ping", chunk_delay=0.02))
    response = httpx.post(proxy.base_url + URL, json=BODY, headers=PATHS[path], timeout=10)
    assert response.content.count(b": ping\n\n") >= 3
    assert text_of(response.content) == "kept alive all the way"
    # The official SDK reads the same stream without tripping on the comments.
    fake_upstream.push(Reply.text("sdk reads it", keepalive="ping"))
    client = openai_client(proxy, session=PATHS[path].get("x-session-id"))
    chunks = list(client.chat.completions.create(**BODY))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "sdk reads it"


PARALLEL = [
    ("read_file", '{"path":"a.py"}'),
    ("read_file", '{"path":"b/long/path/name.py","start":1,"end":200}'),
    ("read_file", '{"path":"c.py"}'),
]


def reply(style: str, calls: list[tuple[str, str]] = PARALLEL) -> Reply:
    with_ids = [{"name": n, "arguments": a, "id": f"call_{i}"} for i, (n, a) in enumerate(calls)]
    return Reply(tool_calls=with_ids, tool_call_style=style, chunk_chars=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("style", STYLES)
def test_pass_through_relays_tool_call_deltas_as_sent(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, style: str
) -> None:
    proxy = make_proxy()
    fake_upstream.push(reply(style))
    body = BODY | {"tools": TOOLS}
    response = httpx.post(proxy.base_url + URL, json=body, headers=PATHS["pass-through"])
    deltas = [
        d
        for p in data_events(response.content)
        if p.get("choices")
        for d in p["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert deltas
    if style == "no_index":
        assert all("index" not in d for d in deltas)
    elif style == "index0":
        assert {d["index"] for d in deltas} == {0}
    else:
        assert {d["index"] for d in deltas} == {0, 1, 2}
    opened = [d["id"] for d in deltas if d.get("id")]
    assert opened == ["call_0", "call_1", "call_2"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("compacted", [False, True], ids=["fresh", "compacted"])
def test_compacting_path_gives_each_call_whole(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: Any,
    style: str,
    compacted: bool,
) -> None:
    proxy = make_proxy(token_threshold=8000)
    client = openai_client(proxy, session="shapes-c", api_key="sk-shapes")
    messages: list[dict[str, Any]] = list(BODY["messages"])  # type: ignore[call-overload]
    if compacted:
        agent = compacted_agent(fake_upstream, proxy, client)
        messages = agent.messages
    fake_upstream.push(reply(style))
    headers = {"authorization": "Bearer sk-shapes", "x-session-id": "shapes-c"}
    body = BODY | {"messages": messages, "tools": TOOLS}
    response = httpx.post(proxy.base_url + URL, json=body, headers=headers, timeout=30)
    assert response.status_code == 200
    if compacted:
        sent = fake_upstream.chat_requests[-1].json
        assert EXTRACT_TOOL_NAME in [t["function"]["name"] for t in sent["tools"]]
    calls = calls_by_index(response.content)
    assert sorted(calls) == [0, 1, 2]
    assert [calls[i]["id"] for i in range(3)] == ["call_0", "call_1", "call_2"]
    assert [calls[i]["arguments"] for i in range(3)] == [a for _, a in PARALLEL]
    assert all(calls[i]["name"] == "read_file" for i in range(3))


@pytest.mark.parametrize("style", STYLES)
def test_extract_calls_mixed_into_parallel_calls_are_hidden_in_every_shape(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: Any, style: str
) -> None:
    proxy = make_proxy(token_threshold=8000)
    client = openai_client(proxy, session="shapes-m", api_key="sk-shapes")
    agent = compacted_agent(fake_upstream, proxy, client)
    first = next(m for m in agent.messages if m["role"] == "tool")["tool_call_id"]
    mixed = [
        ("read_file", '{"path":"x.py"}'),
        (EXTRACT_TOOL_NAME, json.dumps({"toolcall_id": first})),
        ("read_file", '{"path":"y.py"}'),
    ]
    fake_upstream.push(reply(style, mixed))
    headers = {"authorization": "Bearer sk-shapes", "x-session-id": "shapes-m"}
    body = BODY | {"messages": agent.messages, "tools": TOOLS}
    response = httpx.post(proxy.base_url + URL, json=body, headers=headers, timeout=30)
    assert EXTRACT_TOOL_NAME.encode() not in response.content
    calls = calls_by_index(response.content)
    assert sorted(calls) == [0, 1]
    assert [calls[0]["id"], calls[1]["id"]] == ["call_0", "call_2"]
    assert [calls[0]["arguments"], calls[1]["arguments"]] == ['{"path":"x.py"}', '{"path":"y.py"}']
