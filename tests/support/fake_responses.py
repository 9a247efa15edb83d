"""A scripted fake of OpenAI's Responses API (`POST /v1/responses`), served by real uvicorn.

`FakeResponses` is the fake OpenAI API of `tests.support.fake_upstream` (same recording, same chat
completions, same server) whose `/v1/responses` plays a scripted model:

- a policy `(ResponsesRequest) -> Turn` (or queued `Turn`s) decides each output: reasoning
  items with an opaque `encrypted_content`, assistant text, function calls;
- answers as OpenAI does: the whole `response` object, or the event stream (`event:` lines,
  `data:` JSON with `type` and `sequence_number`, `response.created` ... `response.completed`);
- usage grows with the request (`count_input_tokens`, about chars / 4), with a prompt cache
  (`cached_tokens`) for the longest prefix shared with an earlier request; from GPT-5.6 on
  (which bills cache writes) `cache_write_tokens` counts what the request added to the cache
  (its cacheable prefix beyond what was read), 0 for earlier models;
- refuses what OpenAI refuses, in its error shape: an input longer than `context_window`
  (400 `context_length_exceeded`), an output without its call, a call without its output,
  a reasoning item without its following item, an `encrypted_content` it never issued,
  an unknown `previous_response_id`.

Every request is recorded (`responses_requests`) with its headers and body, so a test can
check what reached the model.

    with FakeResponses() as fake:
        fake.policy = ReadFiles(files=12, tool="read_file")
        client = openai.OpenAI(base_url=fake.url, api_key="sk-test")
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.compact import PLACEHOLDER_TEMPLATE, SUMMARY_PROMPT
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.fake_upstream import (
    FakeUpstream,
    RecordedRequest,
    Reply,
    _chunks,
    _Drop,
    _error_body,
    _invalid_type,
    _random_id,
    _stream_parts,
)

_ITEM_OVERHEAD = 4  # tokens per input item, for its role and separators
_CACHE_MIN = 1024  # OpenAI caches prompts from 1024 tokens on, in steps of 128
_CACHE_STEP = 128
_WRITES_BILLED = re.compile(r"(?:^|/)gpt-(\d+)(?:\.(\d+))?")  # from GPT-5.6 on
_OUTPUT_ITEM_TYPES = {
    "message",
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "shell_call",
    "apply_patch_call",
}
_CALL_OUTPUTS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
}
PLACEHOLDER_RE = re.compile(
    re.escape(PLACEHOLDER_TEMPLATE).replace(re.escape("{key}"), r"(?P<key>.+?)")
)
SUMMARY_FIRST_LINE = SUMMARY_PROMPT.splitlines()[0]


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def text_of(value: Any) -> str:
    """The text of a message `content` or a tool `output`: a string or its parts' texts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            part.get("text") or ""
            for part in value
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def item_text(item: Any) -> str:
    """Everything of an input item the model reads as text (what `count_input_tokens` counts)."""
    if not isinstance(item, dict):
        return ""
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        return json.dumps(item, separators=(",", ":"))
    if kind == "message":
        return text_of(item.get("content"))
    if kind in ("function_call", "custom_tool_call"):
        return str(item.get("name") or "") + str(item.get("arguments") or item.get("input") or "")
    if kind.endswith("_output"):
        return text_of(item.get("output"))
    if kind == "reasoning":
        summary = item.get("summary")
        parts = summary if isinstance(summary, list) else []
        return "".join(text_of([s]) for s in parts if isinstance(s, dict))
    return json.dumps(item, separators=(",", ":"))


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`input` as a list of items (a plain string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return [i for i in given if isinstance(i, dict)] if isinstance(given, list) else []


def cache_writes(model: Any, tokens: int, cached: int) -> int:
    """What a request writes into the cache, as GPT-5.6 and later report it (0 before)."""
    version = _WRITES_BILLED.search(str(model or "").lower())
    if version is None or (int(version[1]), int(version[2] or 0)) < (5, 6):
        return 0
    cacheable = 0 if tokens < _CACHE_MIN else tokens // _CACHE_STEP * _CACHE_STEP
    return max(0, cacheable - cached)


def count_input_tokens(body: dict[str, Any], items: list[dict[str, Any]] | None = None) -> int:
    """Input tokens the fake reports: ceil(chars / 4) per item plus 4, the instructions and the
    tools (their compact JSON), and 3 for the reply's header."""
    total = 3 + _tokens(len(str(body.get("instructions") or "")))
    for item in input_items(body) if items is None else items:
        total += _ITEM_OVERHEAD + _tokens(len(item_text(item)))
    if body.get("tools"):
        total += _tokens(len(json.dumps(body["tools"], separators=(",", ":"), ensure_ascii=False)))
    return total


def sequence_problems(items: list[dict[str, Any]]) -> list[str]:
    """Why OpenAI would refuse this item sequence, in its words (empty when it is valid).

    Every tool output comes after its call, every call has its output, and a reasoning item
    is followed by an output item (the call or assistant message it reasoned for).
    """
    problems: list[str] = []
    calls: dict[str, str] = {}
    answered: set[str] = set()
    for position, item in enumerate(items):
        kind = item.get("type", "message")
        if kind in _CALL_OUTPUTS:
            calls[str(item.get("call_id"))] = kind
        elif kind in _CALL_OUTPUTS.values():
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                problems.append(
                    f"No tool call found for function call output with call_id {call_id}."
                )
            answered.add(call_id)
        elif kind == "reasoning":
            following = items[position + 1] if position + 1 < len(items) else {}
            kind = following.get("type", "message")
            produced = kind in _OUTPUT_ITEM_TYPES | {"reasoning"} and (
                kind != "message" or following.get("role") == "assistant"
            )
            if not produced:
                problems.append(
                    f"Item '{item.get('id')}' of type 'reasoning' was provided without its "
                    "required following item."
                )
    for call_id in calls:
        if call_id not in answered:
            problems.append(f"No tool output found for function call {call_id}.")
    return problems


# --- the model's outputs ------------------------------------------------------------------


@dataclass
class Turn:
    """One scripted output of the model, in order: reasoning, text, function calls.

    `calls` are `(name, arguments)` pairs (arguments a dict or a JSON string) or
    `(name, arguments, call_id)` triples. A `status` other than 200 answers `error` in OpenAI's
    shape instead; `failed` streams `response.failed` with that error after `created`.
    `json_to_stream` answers a stream request with the whole response, as some
    OpenAI-compatible servers do. `delay` waits that many seconds before answering.
    """

    text: str | None = None
    reasoning: str | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    status: int = 200
    error: dict[str, Any] | None = None
    failed: bool = False
    usage_override: dict[str, Any] | None = None
    reasoning_tokens: int = 64
    chunk_chars: int = 8
    json_to_stream: bool = False
    delay: float = 0.0  # seconds before the answer (a slow model: a summary that takes long)

    @classmethod
    def call(
        cls, name: str, arguments: dict[str, Any] | str, call_id: str | None = None, **kw: Any
    ) -> Turn:
        return cls(calls=[(name, arguments, call_id)], **kw)

    @classmethod
    def refuse(
        cls, status: int, message: str, type: str, param: str | None = None, code: str | None = None
    ) -> Turn:
        return cls(status=status, error=_error_body(message, type, param, code)["error"])

    @classmethod
    def context_length_exceeded(cls) -> Turn:
        message = (
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again."
        )
        return cls.refuse(400, message, "invalid_request_error", "input", "context_length_exceeded")


@dataclass
class ResponsesRequest:
    """What a policy sees: the body, the full input (with `previous_response_id` expanded)."""

    body: dict[str, Any]
    items: list[dict[str, Any]]
    headers: dict[str, str]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [t for t in self.body.get("tools") or [] if isinstance(t, dict)]

    def tool_names(self) -> list[str]:
        return [str(t.get("name")) for t in self.tools if t.get("name")]

    def is_summary_request(self) -> bool:
        """The proxy's summary requests carry the seed's summary prompt."""
        texts = [str(self.body.get("instructions") or "")]
        texts += [item_text(i) for i in self.items if i.get("type", "message") == "message"]
        return any(SUMMARY_FIRST_LINE in text for text in texts)

    def outputs(self) -> dict[str, str]:
        """Tool outputs by call id, as text."""
        return {
            str(i.get("call_id")): item_text(i)
            for i in self.items
            if str(i.get("type", "")).endswith("_call_output")
        }

    def calls(self) -> list[dict[str, Any]]:
        return [i for i in self.items if i.get("type") in _CALL_OUTPUTS]


Policy = Callable[[ResponsesRequest], Turn]


def _encrypted_blob() -> str:
    """An opaque reasoning blob shaped like OpenAI's (base64 of a Fernet-like token)."""
    raw = b"\x80" + secrets.token_bytes(8 + secrets.randbelow(3) * 64 + 320)
    return base64.urlsafe_b64encode(raw).decode()


class _Rendered:
    """One Turn rendered as output items, a response object and its event stream."""

    def __init__(
        self, fake: FakeResponses, body: dict[str, Any], turn: Turn, usage: dict[str, Any]
    ):
        self.body = body
        self.turn = turn
        self.output: list[dict[str, Any]] = []
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        if turn.reasoning is not None:
            item: dict[str, Any] = {"id": _random_id("rs_", 48), "type": "reasoning"}
            item["summary"] = [{"type": "summary_text", "text": turn.reasoning}]
            if encrypted:
                item["encrypted_content"] = fake._issue(item["id"])
            self.output.append(item)
        if turn.text is not None:
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}
            message = {"id": _random_id("msg_", 48), "type": "message", "status": "completed"}
            self.output.append(message | {"content": [part], "role": "assistant"})
        for call in turn.calls:
            name, arguments = call[0], call[1]
            call_id = (call[2] if len(call) > 2 else None) or _random_id("call_", 24)
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, separators=(",", ":"))
            self.output.append(
                {
                    "id": _random_id("fc_", 48),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": arguments,
                    "call_id": call_id,
                    "name": name,
                }
            )
        self.response = self._response(usage)

    def _response(self, usage: dict[str, Any]) -> dict[str, Any]:
        body = self.body
        visible = sum(len(item_text(i)) for i in self.output if i["type"] != "reasoning")
        reasoning = self.turn.reasoning_tokens if self.turn.reasoning is not None else 0
        output_tokens = max(1, _tokens(visible)) + reasoning
        usage = {
            "input_tokens": usage["input_tokens"],
            "input_tokens_details": {
                "cached_tokens": usage["cached_tokens"],
                "cache_write_tokens": usage.get("cache_write_tokens", 0),
            },
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": usage["input_tokens"] + output_tokens,
        }
        override = self.turn.usage_override or {}
        usage.update(override)
        if "total_tokens" not in override:
            usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        return {
            "id": _random_id("resp_", 48),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": body.get("max_tool_calls"),
            "model": body.get("model"),
            "output": self.output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": {"effort": "medium", "summary": None} | (body.get("reasoning") or {}),
            "safety_identifier": body.get("safety_identifier"),
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_logprobs": 0,
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        size = self.turn.chunk_chars
        pending = {**self.response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": pending}),
            ("response.in_progress", {"response": pending}),
        ]
        for index, item in enumerate(self.output):
            at = {"item_id": item["id"], "output_index": index}
            kind = item["type"]
            if kind == "reasoning":
                opened = {"id": item["id"], "type": "reasoning", "summary": []}
                events.append(
                    ("response.output_item.added", {"output_index": index, "item": opened})
                )
                for n, part in enumerate(item["summary"]):
                    where = {**at, "summary_index": n}
                    empty = {"type": "summary_text", "text": ""}
                    events.append(
                        ("response.reasoning_summary_part.added", {**where, "part": empty})
                    )
                    for piece in _chunks(part["text"], size):
                        delta = {**where, "delta": piece, "obfuscation": _obfuscation(piece)}
                        events.append(("response.reasoning_summary_text.delta", delta))
                    done = {**where, "text": part["text"]}
                    events.append(("response.reasoning_summary_text.done", done))
                    events.append(("response.reasoning_summary_part.done", {**where, "part": part}))
            elif kind == "message":
                part = item["content"][0]
                opened = {**item, "status": "in_progress", "content": []}
                events.append(
                    ("response.output_item.added", {"output_index": index, "item": opened})
                )
                where = {**at, "content_index": 0}
                events.append(
                    ("response.content_part.added", {**where, "part": {**part, "text": ""}})
                )
                for piece in _chunks(part["text"], size):
                    delta = {
                        **where,
                        "delta": piece,
                        "logprobs": [],
                        "obfuscation": _obfuscation(piece),
                    }
                    events.append(("response.output_text.delta", delta))
                done = {**where, "text": part["text"], "logprobs": []}
                events.append(("response.output_text.done", done))
                events.append(("response.content_part.done", {**where, "part": part}))
            else:
                opened = {**item, "status": "in_progress", "arguments": ""}
                events.append(
                    ("response.output_item.added", {"output_index": index, "item": opened})
                )
                for piece in _chunks(item["arguments"], size):
                    delta = {**at, "delta": piece, "obfuscation": _obfuscation(piece)}
                    events.append(("response.function_call_arguments.delta", delta))
                done = {**at, "arguments": item["arguments"]}
                events.append(("response.function_call_arguments.done", done))
            events.append(("response.output_item.done", {"output_index": index, "item": item}))
        events.append(("response.completed", {"response": self.response}))
        return events

    def failed_events(self, error: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        pending = {**self.response, "status": "in_progress", "output": [], "usage": None}
        failed = {
            **pending,
            "status": "failed",
            "error": {"code": error.get("code"), "message": error.get("message")},
        }
        return [
            ("response.created", {"response": pending}),
            ("response.in_progress", {"response": pending}),
            ("response.failed", {"response": failed}),
        ]


def _obfuscation(piece: str) -> str:
    """OpenAI pads stream deltas with random characters so sizes do not leak the content."""
    return secrets.token_urlsafe(12)[: max(1, 16 - len(piece))]


def sse_bytes(events: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    return [
        f"event: {name}\n".encode()
        + b"data: "
        + json.dumps(
            {"type": name, "sequence_number": number, **data}, separators=(",", ":")
        ).encode()
        + b"\n\n"
        for number, (name, data) in enumerate(events)
    ]


# --- the server ---------------------------------------------------------------------------


class FakeResponses(FakeUpstream):
    """The fake OpenAI API with a scripted `/v1/responses`; see the module docstring."""

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._turns: deque[Turn | Policy] = deque()
            self.policy: Policy | None = None
            self.issued: dict[str, str] = {}  # reasoning item id -> encrypted_content sent
            self._stored: dict[str, list[dict[str, Any]]] = {}  # response id -> full items
            self._prefixes: list[list[str]] = []  # earlier prompts, for cached_tokens
            self._answers: dict[int, dict[str, Any]] = {}  # id(record) -> response object

    def push_turns(self, *turns: Turn | Policy) -> None:
        """Queue outputs (or policies) for the next Responses requests, before `policy`."""
        with self._lock:
            self._turns.extend(turns)

    @property
    def responses_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/responses"]

    def answer_to(self, record: RecordedRequest) -> dict[str, Any] | None:
        """The response object the fake answered `record` with (None for a refusal)."""
        with self._lock:
            return self._answers.get(id(record))

    def _issue(self, item_id: str) -> str:
        blob = _encrypted_blob()
        with self._lock:
            self.issued[item_id] = blob
        return blob

    def input_tokens(self, body: dict[str, Any], items: list[dict[str, Any]]) -> int:
        """A request's input tokens as this server counts them: for its `usage`, its cache and
        against `context_window`. `count_input_tokens` here; a subclass stands for another
        tokenizer (tests/support/fake_counting.py)."""
        return count_input_tokens(body, items)

    def _next_turn(self, request: ResponsesRequest) -> Turn:
        with self._lock:
            scripted = self._turns.popleft() if self._turns else self.policy
        if scripted is None:
            return Turn(text="ok")
        return scripted if isinstance(scripted, Turn) else scripted(request)

    def _cached_tokens(self, body: dict[str, Any], items: list[dict[str, Any]]) -> int:
        """Tokens of the longest item prefix shared with an earlier request (OpenAI's steps)."""
        head = json.dumps([body.get("model"), body.get("instructions"), body.get("tools")])
        keys = [head] + [json.dumps(i, sort_keys=True) for i in items]
        best = 0
        with self._lock:
            for earlier in self._prefixes:
                shared = 0
                for mine, theirs in zip(keys, earlier, strict=False):
                    if mine != theirs:
                        break
                    shared += 1
                best = max(best, shared)
            self._prefixes.append(keys)
        if best == 0:
            return 0
        tokens = self.input_tokens(body, items[: best - 1])
        return 0 if tokens < _CACHE_MIN else tokens // _CACHE_STEP * _CACHE_STEP

    def _refusal(
        self, body: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | tuple[int, dict[str, Any]]:
        """(body, full items) for a request OpenAI accepts, else (status, its error body)."""
        if not isinstance(body, dict):
            return 400, _error_body(
                "We could not parse the JSON body of your request.", "invalid_request_error"
            )
        if not body.get("model"):
            message = "Missing required parameter: 'model'."
            return 400, _error_body(
                message, "invalid_request_error", "model", "missing_required_parameter"
            )
        given = body.get("input")
        if given is not None and not isinstance(given, str | list):
            return 400, _invalid_type("input", "one of a string or array of input items", given)
        shape = _shape_problem(body)
        if shape is not None:
            return 400, shape
        items = input_items(body)
        previous = body.get("previous_response_id")
        if previous is not None:
            with self._lock:
                earlier = self._stored.get(str(previous))
            if earlier is None:
                message = f"Previous response with id '{previous}' not found."
                return 404, _error_body(
                    message,
                    "invalid_request_error",
                    "previous_response_id",
                    "previous_response_not_found",
                )
            items = earlier + items
        for item in items:
            if item.get("type") != "reasoning":
                continue
            blob = item.get("encrypted_content")
            with self._lock:
                issued = self.issued.get(str(item.get("id")))
            if blob is None and body.get("store") is False and previous is None:
                message = (
                    f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                    "`store` is set to false. Try again with `store` set to true, or remove this "
                    "item from your input."
                )
                return 404, _error_body(message, "invalid_request_error", "input", None)
            if blob is not None and blob != issued:
                message = (
                    f"The encrypted content for item {item.get('id')} could not be verified. "
                    "Reason: Encrypted content could not be decrypted or parsed."
                )
                return 400, _error_body(
                    message, "invalid_request_error", None, "invalid_encrypted_content"
                )
        problems = sequence_problems(items)
        if problems:
            return 400, _error_body(problems[0], "invalid_request_error", "input", None)
        return body, items

    async def _responses(self, request: Request) -> Response:
        record = await self._record(request)
        checked = self._refusal(record.json)
        if isinstance(checked[0], int):
            return self._json(record, checked[0], checked[1])
        body, items = checked
        seen = ResponsesRequest(body, items, record.headers)
        tokens = self.input_tokens(body, items)
        window = self.context_window
        turn = (
            Turn.context_length_exceeded()
            if window is not None and tokens > window
            else self._next_turn(seen)
        )
        if turn.status != 200 and not turn.failed:
            return self._json(record, turn.status, {"error": turn.error})
        if turn.delay:
            await asyncio.sleep(turn.delay)
        cached = self._cached_tokens(body, items)
        written = cache_writes(body.get("model"), tokens, cached)
        usage = {"input_tokens": tokens, "cached_tokens": cached, "cache_write_tokens": written}
        rendered = _Rendered(self, body, turn, usage)
        with self._lock:
            self._answers[id(record)] = rendered.response
            if body.get("store", True) is not False:
                self._stored[rendered.response["id"]] = items + rendered.output
        if turn.failed:
            events = rendered.failed_events(turn.error or {})
        elif not body.get("stream") or turn.json_to_stream:
            return self._json(record, 200, rendered.response)
        else:
            events = rendered.events()
        parts: AsyncIterator[bytes | _Drop] = _stream_parts(Reply(), sse_bytes(events), -1)
        return self._stream(record, self._headers(), parts)


# --- a scripted agent model ---------------------------------------------------------------


def _shape_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 for a body whose fields or input items have the wrong JSON types."""
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        return _invalid_type("instructions", "a string", instructions)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return _invalid_type("tools", "an array", tools)
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            return _invalid_type(f"tools[{i}]", "an object with a string type", tool)
    given = body.get("input")
    for i, item in enumerate(given if isinstance(given, list) else []):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            return _invalid_type(where, "an object", item)
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            return _invalid_type(f"{where}.type", "a string", kind)
        if kind == "message" and not isinstance(item.get("content"), str | list):
            return _invalid_type(f"{where}.content", "a string or an array", item.get("content"))
        if kind == "message" and item.get("role") not in (
            "user",
            "assistant",
            "system",
            "developer",
        ):
            message = f"Invalid value: '{item.get('role')}'. Supported values are: 'user', "
            message += "'assistant', 'system', and 'developer'."
            return _error_body(message, "invalid_request_error", f"{where}.role", "invalid_value")
        for key in ("call_id", "name", "arguments", "id"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                return _invalid_type(f"{where}.{key}", "a string", value)
        if kind.endswith("_call_output") and "call_id" not in item and "id" not in item:
            message = f"Missing required parameter: '{where}.call_id'."
            return _error_body(message, "invalid_request_error", f"{where}.call_id", None)
    return None


def file_text(n: int, size: int) -> str:
    """The content of test file n: recognisable lines, `size` characters."""
    line = f"file {n} line: " + "abcdefghij" * 6 + "\n"
    return (line * (size // len(line) + 1))[:size]


FILE_RE = re.compile(r"file_(\d+)\.txt")


def after_summaries(requests: list[RecordedRequest]) -> list[tuple[RecordedRequest, str]]:
    """Each model request made after a summary request, with the marker of the newest
    summary before it (what `ReadFiles` answered to that summary request)."""
    found: list[tuple[RecordedRequest, str]] = []
    summaries = 0
    for record in requests:
        body = record.json if isinstance(record.json, dict) else {}
        if ResponsesRequest(body, input_items(body), record.headers).is_summary_request():
            summaries += 1
        elif summaries:
            found.append((record, ReadFiles.summary_marker(summaries)))
    return found


def seen_text(body: dict[str, Any]) -> str:
    """The instructions and every message's text: where a summary can reach the model."""
    messages = [i for i in input_items(body) if i.get("type", "message") == "message"]
    return str(body.get("instructions") or "") + "".join(item_text(i) for i in messages)


class ReadFiles:
    """A model that reads files 1..`files` one per turn with the client's tool, then answers.

    `tool="exec_command"` reads with Codex's shell tool (`{"cmd": "cat file_N.txt"}`), any
    other name with a `{"path": "file_N.txt"}` function. The next file is derived from the
    newest read call in the input, so a compacted history does not change the plan. Once a
    tool output is a level-1 placeholder, it calls `extract_compacted_tool_result` with its ID
    (once per run). Every turn carries a reasoning item. Summary requests get a summary with
    a unique marker (`summary_marker(n)`).
    """

    def __init__(self, files: int, tool: str = "exec_command") -> None:
        self.files = files
        self.tool = tool
        self.extracted: list[str] = []  # placeholder IDs the model asked for
        self.extract_call_ids: list[str] = []  # the call ids of those extract calls
        self.summaries = 0
        self.turns = 0

    @staticmethod
    def summary_marker(n: int) -> str:
        return f"SUMMARY-MARKER-{n}"

    def read_call(self, n: int) -> tuple[str, dict[str, Any]]:
        if self.tool == "exec_command":
            return self.tool, {"cmd": f"cat file_{n}.txt", "yield_time_ms": 10000}
        return self.tool, {"path": f"file_{n}.txt"}

    def __call__(self, request: ResponsesRequest) -> Turn:
        if request.is_summary_request():
            self.summaries += 1
            marker = self.summary_marker(self.summaries)
            text = f"## overview\n{marker}: the agent is reading numbered files one by one."
            return Turn(text=text)
        self.turns += 1
        newest = 0
        for call in request.calls():
            if call.get("name") == self.tool:
                found = FILE_RE.findall(str(call.get("arguments") or ""))
                newest = max([newest, *(int(n) for n in found)])
        if not self.extracted and EXTRACT_TOOL_NAME in request.tool_names():
            for output in request.outputs().values():
                match = PLACEHOLDER_RE.search(output)
                if match:
                    call_id = _random_id("call_", 24)
                    self.extracted.append(match.group("key"))
                    self.extract_call_ids.append(call_id)
                    args = {"toolcall_id": match.group("key")}
                    why = "An output was compacted: get it back."
                    return Turn.call(EXTRACT_TOOL_NAME, args, call_id, reasoning=why)
        if newest >= self.files:
            return Turn(text=f"Done: read {self.files} files.", reasoning="All files are read.")
        name, args = self.read_call(newest + 1)
        return Turn.call(name, args, reasoning=f"Next, read file {newest + 1}.")
