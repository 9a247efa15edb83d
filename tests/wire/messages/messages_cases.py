"""Anthropic Messages data for the wire tests: histories, a generator, scripted streams.

`anthropic_errors` lists what Anthropic would refuse in a `messages` list (the rules the
adapter must keep after compaction), so tests can assert an empty list; `stream` writes a
Messages stream as Anthropic does and `client_view` folds what a client received.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
from hypothesis import strategies as st

from proxy.wire.messages.stream import MessagesRelay
from proxy.wire.sse import SSEDecoder

SIG = "EqQBCkYIBxgCKkD+sig/with==padding"

SYSTEM_BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Tools: Read, Bash.", "cache_control": {"type": "ephemeral"}},
]


def tool_use(call_id: str, name: str = "Read", **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


def tool_result(call_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def session() -> list[dict[str, Any]]:
    """A Claude Code-like history: thinking, parallel calls, server tools, a mid system."""
    return [
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug in a.py"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Read both files.", "signature": SIG},
                {"type": "text", "text": "Reading."},
                tool_use("toolu_1", file_path="/a.py"),
                tool_use("toolu_2", file_path="/b.py"),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("toolu_1", "A" * 300),
                tool_result(
                    "toolu_2",
                    [{"type": "text", "text": "B" * 300}],
                    is_error=True,
                    cache_control={"type": "ephemeral"},
                ),
                {"type": "text", "text": "<system-reminder>be brief</system-reminder>"},
            ],
        },
        {"role": "system", "content": "The user switched to plan mode."},
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                 "input": {"query": "python bug"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                 "content": [{"type": "web_search_result", "url": "https://x", "title": "X",
                              "encrypted_content": "enc"}]},
                {"type": "future_block", "payload": {"k": 1}},
                tool_use("toolu_3", name="Bash", command="pytest"),
            ],
        },
        {"role": "user", "content": [tool_result("toolu_3", "C" * 300)]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Done.", "signature": SIG + "2"},
                {"type": "text", "text": "Fixed."},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}},
                {"type": "text", "text": "and this?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]  # fmt: skip


def anthropic_errors(messages: list[dict[str, Any]]) -> list[str]:
    """What Anthropic would refuse: a non-user start, a misplaced or orphan tool_result,
    a tool_use left unanswered by the next message. Consecutive assistant messages are one
    turn, as Anthropic joins them."""
    errors = []
    if messages and messages[0].get("role") != "user":
        errors.append("first message is not a user message")
    run: list[str] = []  # tool_use ids of the assistant messages just before
    for k, msg in enumerate(messages):
        role = msg.get("role")
        content = msg.get("content") if isinstance(msg.get("content"), list) else []
        after_assistant = k > 0 and messages[k - 1].get("role") == "assistant"
        results = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
        if results and role != "user":
            errors.append(f"{k}: tool_result outside a user message")
        if role == "assistant":
            ids = [b["id"] for b in content if b.get("type") == "tool_use"]
            run = (run if after_assistant else []) + ids
            continue
        calls = run if after_assistant else []
        kinds = [b.get("type") for b in content]
        if any(r not in calls for r in results):
            errors.append(f"{k}: tool_result without its tool_use just before")
        if "tool_result" in kinds and kinds[: len(results)] != ["tool_result"] * len(results):
            errors.append(f"{k}: tool_result blocks not first")
        if set(calls) - set(results):
            errors.append(f"{k}: tool_use of the turn before unanswered")
    return errors


# -- a generator of valid Messages requests -------------------------------------------------

short_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
cache = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])


@st.composite
def text_block(draw: st.DrawFn) -> dict[str, Any]:
    return {"type": "text", "text": draw(short_text) or "t", **draw(cache)}


@st.composite
def user_extra_block(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text", "image", "document", "unknown"]))
    if kind == "image":
        source = draw(
            st.sampled_from(
                [
                    {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
                    {"type": "url", "url": "https://example.com/a.png"},
                ]
            )
        )
        return {"type": "image", "source": source}
    if kind == "document":
        return {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": draw(short_text)},
        }
    if kind == "unknown":
        return {"type": "search_result", "source": "s", "title": "t", "content": []}
    return draw(text_block())


@st.composite
def result_content(draw: st.DrawFn) -> dict[str, Any]:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return {"content": draw(short_text)}
    if choice == 1:
        return {"content": draw(st.lists(text_block(), max_size=2))}
    if choice == 2:
        return {}
    return {"content": draw(short_text), "is_error": draw(st.booleans())}


@st.composite
def assistant(draw: st.DrawFn, call_ids: list[str]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocks.append(
            {"type": "thinking", "thinking": draw(short_text), "signature": SIG + draw(short_text)}
        )
    if draw(st.booleans()):
        blocks.append({"type": "redacted_thinking", "data": "r" + draw(short_text)})
    if draw(st.booleans()):
        blocks.append(draw(text_block()))
    if draw(st.booleans()):
        blocks.append({"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}})
        blocks.append({"type": "web_search_tool_result", "tool_use_id": "srv", "content": []})
    for call_id in call_ids:
        blocks.append({**tool_use(call_id, q=draw(short_text)), **draw(cache)})
    if draw(st.booleans()) and not call_ids:
        return {"role": "assistant", "content": draw(short_text) or "ok"}
    return {"role": "assistant", "content": blocks or [{"type": "text", "text": "ok"}]}


@st.composite
def requests(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    system = draw(
        st.one_of(
            st.none(),
            short_text,
            st.lists(text_block(), max_size=3),
        )
    )
    messages: list[dict[str, Any]] = []
    first = draw(st.one_of(short_text, st.lists(user_extra_block(), min_size=1, max_size=3)))
    messages.append({"role": "user", "content": first})
    counter = 0
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 4)) == 0:
            messages.append({"role": "system", "content": draw(short_text) or "note"})
        n_calls = draw(st.integers(0, 3))
        ids = [f"toolu_{counter + i}" for i in range(n_calls)]
        counter += n_calls
        reply = draw(assistant(ids))
        content = reply["content"]
        cut = draw(st.integers(0, len(content))) if isinstance(content, list) else 0
        if 0 < cut < len(content):  # one turn sent as two assistant messages
            messages.append({"role": "assistant", "content": content[:cut]})
            messages.append({"role": "assistant", "content": content[cut:]})
        else:
            messages.append(reply)
        if ids:
            order = draw(st.permutations(ids))
            blocks: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": i, **draw(result_content()), **draw(cache)}
                for i in order
            ]
            blocks += draw(st.lists(user_extra_block(), max_size=2))
            messages.append({"role": "user", "content": blocks})
        else:
            content = draw(
                st.one_of(short_text, st.lists(user_extra_block(), min_size=1, max_size=2))
            )
            messages.append({"role": "user", "content": content})
    return system, messages


# -- scripted streams ------------------------------------------------------------

EXTRACT = "extract_compacted_tool_result"


def sse(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {orjson.dumps(data).decode()}\n\n".encode()


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def thinking(value: str, signature: str = SIG) -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def use(call_id: str, name: str = "Read", **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


def extract(call_id: str, target: str = "toolu_1") -> dict[str, Any]:
    return use(call_id, EXTRACT, toolcall_id=target)


def stream(
    msg_id: str,
    blocks: list[dict[str, Any]],
    stop: str,
    usage: dict[str, int],
    *,
    output: int = 7,
) -> bytes:
    """A Messages stream as Anthropic writes it: each block started empty, then deltas."""
    start_usage = {**usage, "output_tokens": 1}
    message = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    out = [sse("message_start", {"type": "message_start", "message": message})]
    out.append(sse("ping", {"type": "ping"}))
    for i, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            empty, deltas = (
                {"type": "text", "text": ""},
                [
                    {"type": "text_delta", "text": block["text"][:3]},
                    {"type": "text_delta", "text": block["text"][3:]},
                ],
            )
        elif kind == "thinking":
            empty, deltas = (
                {"type": "thinking", "thinking": "", "signature": ""},
                [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ],
            )
        else:
            raw = orjson.dumps(block["input"]).decode()
            empty = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[:5]},
                {"type": "input_json_delta", "partial_json": raw[5:]},
            ]
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": empty},
            )
        )
        for delta in deltas:
            out.append(
                sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                )
            )
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output},
            },
        )
    )
    out.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)  # fmt: skip


def relay_round(relay: MessagesRelay, data: bytes, cuts: list[int] | None = None) -> bytes:
    """Feed one upstream stream, split at `cuts`, through a real SSE decoder."""
    decoder = SSEDecoder()
    sent = []
    bounds = [0, *sorted(c for c in cuts or [] if 0 < c < len(data)), len(data)]
    for a, b in itertools.pairwise(bounds):
        for event in decoder.feed(data[a:b]):
            sent.extend(relay.feed(event.event, event.data, event.raw))
    for event in decoder.flush():
        sent.extend(relay.feed(event.event, event.data, event.raw))
    return b"".join(sent)


def client_view(data: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The client's events, and the message a client folds them into (checked strictly)."""
    events = [orjson.loads(e.data) for e in SSEDecoder().feed(data) if e.data is not None]
    message: dict[str, Any] = {}
    open_blocks: dict[int, str] = {}
    for ev in events:
        kind = ev["type"]
        if kind == "message_start":
            assert not message, "a second message_start"
            message = {**ev["message"], "content": []}
        elif kind == "content_block_start":
            assert ev["index"] == len(message["content"]), "indices not consecutive"
            message["content"].append(dict(ev["content_block"]))
            open_blocks[ev["index"]] = ""
        elif kind == "content_block_delta":
            block, delta = message["content"][ev["index"]], ev["delta"]
            assert ev["index"] in open_blocks
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            else:
                open_blocks[ev["index"]] += delta["partial_json"]
        elif kind == "content_block_stop":
            partial = open_blocks.pop(ev["index"])
            if partial:
                message["content"][ev["index"]]["input"] = orjson.loads(partial)
        elif kind == "message_delta":
            message.update(ev["delta"])
            message["usage"] = {**message["usage"], **ev["usage"]}
        elif kind == "message_stop":
            message["stopped"] = True
    assert not open_blocks
    return events, message


USAGE_1 = {"input_tokens": 100, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 50}
USAGE_2 = {"input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 160}


def reply(msg_id: str, content: list[Any], stop: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
