"""The corpus replay on each wire: Chat Completions, Responses and Anthropic Messages.

The corpus is in chat messages (`tests.support.corpus`). A replaying client sends each turn's
history in its wire's shape, converted by the proxy's own pure adapters (Responses: stateless,
the history as `input` items; Messages: `system` and the messages), with the trajectory's
tools in that wire's shape. The replay upstream (`tests.bench.economy.ReplayUpstream` and its
subclasses) keeps its books in chat messages: a request on another wire is converted back
with the same adapters, answered as a chat completion, and that answer is given in the wire's
shape (a Responses `response`, a Messages `message`) with the usage that wire reports.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.wire.messages.from_neutral import from_neutral
from proxy.wire.messages.to_neutral import to_neutral
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import items_to_messages

WIRES = ("chat", "responses", "messages")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
MODELS = {"chat": "gpt-4o", "responses": "gpt-4o", "messages": "claude-opus-4-6"}
KEEP = ("role", "content", "tool_calls", "tool_call_id", "name")


def wire_tools(wire: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat tools in a wire's shape."""
    if wire == "chat":
        return tools
    out = []
    for tool in tools:
        fn = tool.get("function") or {}
        if wire == "responses":
            out.append({"type": "function", **fn})
        else:
            schema = fn.get("parameters") or {"type": "object", "properties": {}}
            desc = {"description": fn["description"]} if fn.get("description") else {}
            out.append({"name": fn.get("name"), **desc, "input_schema": schema})
    return out


def chat_tools(wire: str, tools: Any) -> list[dict[str, Any]]:
    """A wire's tools back in chat's shape (for the books)."""
    if wire == "chat" or not isinstance(tools, list):
        return tools if isinstance(tools, list) else []
    out = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if wire == "responses":
            fn = {k: v for k, v in tool.items() if k != "type"}
        else:
            fn = {k: tool[k] for k in ("name", "description") if k in tool}
            fn["parameters"] = tool.get("input_schema")
        out.append({"type": "function", "function": fn})
    return out


def client_body(
    wire: str, history: list[dict[str, Any]], tools: list[dict[str, Any]], key: str
) -> dict[str, Any]:
    """One turn's request body on a wire."""
    body: dict[str, Any] = {"model": MODELS[wire]}
    if wire == "chat":
        body.update(messages=history, user=key)
    elif wire == "responses":
        body.update(input=messages_to_items(history), store=False, user=key)
    else:
        system, messages = from_neutral(history)
        if system is not None:
            body["system"] = system
        body.update(messages=messages, max_tokens=4096, metadata={"user_id": key})
    if tools:
        body["tools"] = wire_tools(wire, tools)
    return body


def client_headers(wire: str) -> dict[str, str]:
    if wire == "messages":
        return {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01"}
    return {"authorization": "Bearer sk-bench"}


def as_chat(wire: str, body: dict[str, Any]) -> dict[str, Any]:
    """A request on a wire as the chat request the books count."""
    if wire == "chat":
        return body
    if wire == "responses":
        neutral = items_to_messages(body.get("input") or [])
        if body.get("instructions"):
            neutral = [{"role": "system", "content": body["instructions"]}, *neutral]
    else:
        neutral = to_neutral(body.get("system"), body.get("messages") or [])
    messages = [{k: m[k] for k in KEEP if m.get(k) is not None} for m in neutral]
    for m in messages:
        m.setdefault("content", None)
    return {"messages": messages, "tools": chat_tools(wire, body.get("tools"))}


def bench_key(request: Request, body: dict[str, Any]) -> str:
    meta = body.get("metadata")
    user = meta.get("user_id") if isinstance(meta, dict) else None
    return request.headers.get("x-bench-key") or str(body.get("user") or user or "")


def wire_reply(wire: str, chat: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (`tests.bench.economy.completion`) in a wire's shape."""
    if wire == "chat":
        return chat
    message = chat["choices"][0]["message"]
    usage = chat["usage"]
    prompt, out = usage["prompt_tokens"], usage["completion_tokens"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    calls = message.get("tool_calls") or []
    text = message.get("content")
    if wire == "responses":
        output: list[dict[str, Any]] = []
        if text:
            part = {"type": "output_text", "text": text, "annotations": []}
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex[:12]}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [part],
                }
            )
        for call in calls:
            fn = call["function"]
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:12]}",
                    "call_id": call["id"],
                    "name": fn["name"],
                    "arguments": fn["arguments"],
                    "status": "completed",
                }
            )
        return {
            "id": f"resp_{uuid.uuid4().hex[:12]}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": MODELS[wire],
            "output": output,
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + out,
            },
        }
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for call in calls:
        fn = call["function"]
        try:
            args = json.loads(fn["arguments"] or "{}")
        except ValueError:
            args = {"input": fn["arguments"]}
        content.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": args})
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": MODELS[wire],
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt - cached,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": out,
        },
    }


async def send_turn(
    client: httpx.AsyncClient,
    base: str,
    wire: str,
    key: str,
    session: str,
    history: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    now: float | None,
) -> httpx.Response:
    """One turn of a replaying client on a wire."""
    headers = {
        **client_headers(wire),
        "content-type": "application/json",
        "x-bench-key": key,
        "X-Session-Id": session,
    }
    if now is not None:
        headers["x-bench-now"] = repr(now)
    body = orjson.dumps(client_body(wire, history, tools, key))
    return await client.post(base + PATHS[wire], content=body, headers=headers)


def error(message: str) -> Response:
    err = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return JSONResponse({"error": err}, 400)
