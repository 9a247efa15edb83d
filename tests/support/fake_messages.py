"""A faithful fake of Anthropic's Messages API (`POST /v1/messages`), served by real uvicorn.

`FakeMessages` is the OpenAI fake (`tests.support.fake_upstream.FakeUpstream`, whose server, request
recording and chat routes it keeps) plus `/v1/messages` and `/v1/messages/count_tokens` in
Anthropic's exact wire format:

- JSON answers, or the event stream `message_start`, `content_block_start` / `_delta`
  (`text_delta`, `input_json_delta`, `thinking_delta`, `signature_delta`) / `_stop`, `ping`,
  `message_delta`, `message_stop`; errors as `{"type": "error", "error": {...}}`.
- Usage grows with the request (`count_input_tokens`), split as Anthropic splits it between
  `input_tokens`, `cache_creation_input_tokens` and `cache_read_input_tokens` by the request's
  `cache_control` breakpoints and what earlier requests wrote to the (simulated) cache.
- Thinking blocks carry an opaque random `signature`; the fake remembers what it signed and
  refuses a request whose thinking comes back altered, as Anthropic does. It also binds each
  block to its prefix and, for the models that run Anthropic's prefix checks (or with
  `prefix_checks = True`), refuses a block whose prefix changed or drops it on request
  (`"drop_block"`, listed in `input_transformations`): tests/support/fake_binding.py.
- Requests are validated as Anthropic would: a `tool_result` without its `tool_use` in the
  previous message (or the reverse), more than 4 breakpoints, a system-role message without
  its beta, a prompt over `context_window` ("prompt is too long"), ... each a 400.

The model is scripted: `push(Turn...)` queues answers, `default = policy` answers the rest
with `policy(body) -> Turn` (see tests/support/claude_model.py).

    with FakeMessages() as fake:
        fake.push(Turn.tool("Read", {"file_path": "/tmp/a"}, thinking="Look."), Turn.text("Done."))
        client = anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-test")
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.fake_binding import (
    BINDING_BETA,
    PREFIX_CHECK_MODELS,
    binding_key,
    check_prefixes,
    reply_digests,
)
from tests.support.fake_upstream import (
    FakeUpstream,
    RecordedRequest,
    _chunks,
    _parts,
    _random_id,
    _stream_parts,
    _tokens,
    _WatchedResponse,
)

MAX_BREAKPOINTS = 4
MIN_CACHEABLE_TOKENS = 1024  # Anthropic caches no prefix shorter than this (Sonnet, Opus)
CACHE_LOOKBACK = 20  # blocks a breakpoint looks back for an earlier cached prefix
MESSAGE_OVERHEAD = 4  # tokens per message, for its role and separators
SYSTEM_ROLE_BETA = "mid-conversation-system"
ANTHROPIC_MODELS = ("claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001")
CREATED_AT = "2025-09-29T00:00:00Z"
TurnPolicy = Callable[[dict[str, Any]], "Turn"]


def error_body(type: str, message: str) -> dict[str, Any]:
    """Anthropic's error envelope."""
    return {
        "type": "error",
        "error": {"type": type, "message": message},
        "request_id": _random_id("req_", 24),
    }


def new_signature() -> str:
    """An opaque thinking signature: random bytes, base64 (Anthropic's are of this shape)."""
    return base64.b64encode(secrets.token_bytes(144)).decode()


def block_text(content: Any) -> str:
    """The text of a `content` (a string, or the `text` of its text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return ""


def _block_chars(block: Any) -> int:
    """Characters a content block costs; the fake's tokenizer is chars / 4."""
    if isinstance(block, str):
        return len(block)
    if not isinstance(block, dict):
        return 0
    kind = block.get("type")
    if kind == "text":
        return len(str(block.get("text") or ""))
    if kind in ("tool_use", "server_tool_use"):
        return len(str(block.get("name") or "")) + len(json.dumps(block.get("input") or {}))
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return 16 + sum(_block_chars(b) for b in content)
        return 16 + len(block_text(content))
    if kind == "thinking":
        return len(str(block.get("thinking") or ""))
    if kind == "redacted_thinking":
        return len(str(block.get("data") or "")) // 4
    if kind in ("image", "document"):
        return 6000  # a fixed price, as a small image costs about 1500 tokens
    return len(json.dumps(block))


def _canonical(obj: Any) -> bytes:
    """An object's bytes for the cache's prefix hash: `cache_control` marks are not content."""
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k != "cache_control"}
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class _Segment:
    tokens: int
    breakpoint: bool
    digest: str  # hash of the whole prefix up to and including this segment
    ttl: str = "5m"  # the cache lifetime its breakpoint asks for


def _ttl(obj: Any) -> str:
    mark = obj.get("cache_control") if isinstance(obj, dict) else None
    return "1h" if isinstance(mark, dict) and mark.get("ttl") == "1h" else "5m"


def _segments(body: dict[str, Any]) -> list[_Segment]:
    """The prompt in cache order (tools, system, messages), one segment per block.

    The priming tokens every prompt pays ride on the first segment.
    """
    items: list[tuple[Any, int, bool]] = []
    ttls: list[str] = []
    for tool in body.get("tools") or []:
        marked = isinstance(tool, dict) and "cache_control" in tool
        items.append((tool, _tokens(len(json.dumps(_strip_cc(tool)))), marked))
        ttls.append(_ttl(tool))
    system = body.get("system")
    blocks = [system] if isinstance(system, str) else system or []
    for block in blocks:
        marked = isinstance(block, dict) and "cache_control" in block
        items.append((block, _tokens(_block_chars(block)), marked))
        ttls.append(_ttl(block))
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        parts = [content] if isinstance(content, str) else content or []
        for position, block in enumerate(parts):
            marked = isinstance(block, dict) and "cache_control" in block
            tokens = _tokens(_block_chars(block)) + (MESSAGE_OVERHEAD if position == 0 else 0)
            # The mark is no content: a breakpoint moved to a later block still finds this one.
            items.append(({"role": message.get("role"), "block": _strip_cc(block)}, tokens, marked))
            ttls.append(_ttl(block))
    chain = hashlib.sha256(str(body.get("model")).encode())
    segments = []
    for number, (obj, tokens, marked) in enumerate(items):
        chain.update(_canonical(obj))
        tokens += 3 if number == 0 else 0
        segments.append(_Segment(tokens, marked, chain.hexdigest(), ttls[number]))
    return segments


def _strip_cc(obj: Any) -> Any:
    return {k: v for k, v in obj.items() if k != "cache_control"} if isinstance(obj, dict) else obj


def count_input_tokens(body: dict[str, Any]) -> int:
    """The whole prompt's tokens as the fake counts them (what count_tokens answers).

    3 + per tool ceil(len(json)/4) + per system block ceil(chars/4) + per message 4 + per
    content block ceil(chars/4) (text; tool_use name + input json; tool_result 16 + its text;
    thinking text; images 1500).
    """
    return sum(s.tokens for s in _segments(body))


def cache_breakpoints(body: dict[str, Any]) -> int:
    """How many `cache_control` breakpoints a request carries (Anthropic allows 4)."""
    return sum(s.breakpoint for s in _segments(body))


@dataclass
class Turn:
    """One scripted answer to a Messages request.

    `content` holds the final blocks: `{"type": "text", "text"}`, `{"type": "thinking",
    "thinking"}` (a signature is added when missing), `{"type": "redacted_thinking", "data"}`,
    `{"type": "tool_use", "name", "input", "id"?}` (ids filled in as `toolu_...`). A `status`
    other than 200 answers `error` (`{"type", "message"}`) in Anthropic's envelope;
    `stream_error` sends that error as an `event: error` after `stream_error_after` events.
    `json_to_stream` answers a stream request with the whole message, as some gateways do.

    The stream fields `chunk_chars`, `chunk_delay`, `delay`, `drop_after`, `keepalive` and
    `hold` mean what they mean on `tests.support.fake_upstream.Reply` (the same stream writer).
    """

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    usage_override: dict[str, Any] | None = None
    stream_error: dict[str, Any] | None = None
    stream_error_after: int = 3
    json_to_stream: bool = False
    chunk_chars: int = 24
    chunk_delay: float = 0.0
    delay: float = 0.0
    drop_after: int | None = None
    keepalive: str | None = None
    hold: threading.Event | None = None

    @classmethod
    def text(cls, text: str, *, thinking: str | None = None, **kwargs: Any) -> Turn:
        blocks = [{"type": "thinking", "thinking": thinking}] if thinking else []
        return cls(content=[*blocks, {"type": "text", "text": text}], **kwargs)

    @classmethod
    def tool(
        cls,
        name: str,
        input: dict[str, Any] | None = None,
        *,
        id: str | None = None,
        thinking: str | None = None,
        text: str | None = None,
        **kwargs: Any,
    ) -> Turn:
        blocks: list[dict[str, Any]] = []
        if thinking:
            blocks.append({"type": "thinking", "thinking": thinking})
        if text:
            blocks.append({"type": "text", "text": text})
        blocks.append({"type": "tool_use", "id": id, "name": name, "input": input or {}})
        return cls(content=blocks, **kwargs)

    @classmethod
    def failure(cls, status: int, type: str, message: str, **kwargs: Any) -> Turn:
        return cls(status=status, error={"type": type, "message": message}, **kwargs)

    @classmethod
    def overloaded(cls) -> Turn:
        return cls.failure(529, "overloaded_error", "Overloaded")

    @classmethod
    def rate_limited(cls, retry_after: float = 1) -> Turn:
        message = (
            "This request would exceed the rate limit for your organization of 30,000 input "
            "tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."
        )
        headers = {"retry-after": f"{retry_after:g}"}
        return cls.failure(429, "rate_limit_error", message, headers=headers)

    @classmethod
    def prompt_too_long(cls, tokens: int, limit: int) -> Turn:
        message = f"prompt is too long: {tokens} tokens > {limit} maximum"
        return cls.failure(400, "invalid_request_error", message)


class FakeMessages(FakeUpstream):
    """The fake Anthropic API (and the OpenAI one it extends); see the module docstring."""

    def reset(self) -> None:
        """Forget requests, queued turns, the cache, the signatures and the scripting."""
        super().reset()
        with self._lock:
            self._turns: deque[Turn | TurnPolicy] = deque()
            self.policy: TurnPolicy | None = None
            # signature -> the thinking text it signed; tool_use id -> its turn had thinking
            self.signed: dict[str, str] = {}
            self.thought_before: dict[str, bool] = {}
            self._cache: set[str] = set()
            # thinking signature (redacted: data) -> the digest of the prefix it was signed over
            self.bound: dict[str, str] = {}
            # None: prefix checks for the models that run them (PREFIX_CHECK_MODELS)
            self.prefix_checks: bool | None = None
            # (request, input_transformations) of each request that had blocks dropped
            self.dropped: list[tuple[RecordedRequest, list[dict[str, str]]]] = []
            # every answer other than 200: (request, status, Anthropic error body)
            self.refused: list[tuple[RecordedRequest, int, dict[str, Any]]] = []

    # scripting ---------------------------------------------------------------------------

    def push_turns(self, *turns: Turn | TurnPolicy) -> None:
        """Queue answers (or `policy(body) -> Turn` callables) for the next Messages requests."""
        with self._lock:
            self._turns.extend(turns)

    @property
    def messages_requests(self) -> list[RecordedRequest]:
        """Every `POST /v1/messages` received (with or without `?beta=true`), in order."""
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/messages"]

    @property
    def count_tokens_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/messages/count_tokens"]

    def input_tokens(self, body: dict[str, Any]) -> int:
        """A request's input tokens as this server counts them: what `count_tokens` answers
        and what `context_window` is held against. `count_input_tokens` here; a subclass
        stands for another tokenizer (tests/support/fake_counting.py) and splits `_input_usage`
        alike."""
        return count_input_tokens(body)

    def _next_turn(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            scripted = self._turns.popleft() if self._turns else self.policy
        if scripted is None:
            return Turn.text("ok")
        return scripted if isinstance(scripted, Turn) else scripted(body)

    # HTTP --------------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        return [
            Route("/v1/messages", self._messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            # Claude Code probes its base URL with `HEAD /` before the first request.
            Route("/", self._root, methods=["GET", "HEAD"]),
            Route("/v1/models", self._anthropic_models, methods=["GET"]),
            *super()._routes(),
        ]

    def _anthropic_json(
        self,
        record: RecordedRequest,
        status: int,
        payload: Any,
        turn: Turn | None = None,
    ) -> Response:
        if status != 200:
            with self._lock:
                self.refused.append((record, status, payload))
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = self._anthropic_headers(turn)
        headers["content-type"] = "application/json"
        headers["content-length"] = str(len(body))
        parts = _parts(turn or Turn(), [body])  # type: ignore[arg-type]
        return _WatchedResponse(status, headers, parts, self._closed(record))

    @staticmethod
    def _anthropic_headers(turn: Turn | None) -> dict[str, str]:
        headers = {
            "request-id": _random_id("req_", 24),
            "anthropic-organization-id": "00000000-0000-4000-8000-000000000000",
        }
        headers.update(turn.headers if turn else {})
        return headers

    async def _anthropic_models(self, request: Request) -> Response:
        """Anthropic's `GET /v1/models` to a request in its API (`anthropic-version`); the
        OpenAI fake's list to others (this server stands for both in some tests)."""
        if "anthropic-version" not in request.headers:
            return await self._models(request)
        record = await self._record(request)
        data = [
            {"type": "model", "id": name, "display_name": name, "created_at": CREATED_AT}
            for name in ANTHROPIC_MODELS
        ]
        page = {"data": data, "has_more": False, "first_id": data[0]["id"]}
        return self._anthropic_json(record, 200, page | {"last_id": data[-1]["id"]})

    async def _root(self, request: Request) -> Response:
        record = await self._record(request)
        return self._anthropic_json(record, 200, {"ok": True})

    async def _count_tokens(self, request: Request) -> Response:
        record = await self._record(request)
        body = record.json
        invalid = self._validate(body, record.headers, need_max_tokens=False)
        if invalid is not None:
            return self._anthropic_json(record, 400, invalid)
        return self._anthropic_json(record, 200, {"input_tokens": self.input_tokens(body)})

    async def _messages(self, request: Request) -> Response:
        record = await self._record(request)
        body = record.json
        invalid = self._validate(body, record.headers, need_max_tokens=True)
        if invalid is not None:
            return self._anthropic_json(record, 400, invalid)
        transformations: list[dict[str, str]] = []
        if self.checks_prefixes(body):
            body, transformations, refusal = self._check_binding(body, record.headers)
            if refusal is not None:
                return self._anthropic_json(record, 400, refusal)
        total = self.input_tokens(body)
        window = self.context_window
        if window is not None and total > window:
            turn = Turn.prompt_too_long(total, window)
        else:
            turn = self._next_turn(body)
        if turn.status != 200 or turn.error is not None:
            error = error_body(**(turn.error or {"type": "api_error", "message": "error"}))
            return self._anthropic_json(record, turn.status, error, turn)
        message = self._message(body, turn)
        if transformations:
            message["input_transformations"] = transformations
            with self._lock:
                self.dropped.append((record, transformations))
        if not body.get("stream") or turn.json_to_stream:
            return self._anthropic_json(record, 200, message, turn)
        events = _events(message, turn)
        headers = self._anthropic_headers(turn)
        parts = _stream_parts(turn, events, 0)  # type: ignore[arg-type]
        return self._stream(record, headers, parts)

    # the model's answer ------------------------------------------------------------------

    def checks_prefixes(self, body: dict[str, Any]) -> bool:
        """Whether this request's thinking blocks get Anthropic's prefix check."""
        if self.prefix_checks is not None:
            return self.prefix_checks
        return str(body.get("model") or "").startswith(PREFIX_CHECK_MODELS)

    def _check_binding(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[dict[str, Any], list[dict[str, str]], dict[str, Any] | None]:
        """The body the model reads, the blocks dropped, or the 400 for a changed prefix."""
        thinking = body.get("thinking")
        binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
        behavior = binding.get("prefix_mismatch_behavior") if isinstance(binding, dict) else None
        if behavior is not None and BINDING_BETA not in headers.get("anthropic-beta", ""):
            message = (
                "thinking.block_binding: this field requires the beta header "
                f"`anthropic-beta: {BINDING_BETA}`."
            )
            return body, [], error_body("invalid_request_error", message)
        if behavior not in (None, "error", "drop_block"):
            message = (
                "thinking.block_binding.prefix_mismatch_behavior: Input should be 'error' or "
                "'drop_block'"
            )
            return body, [], error_body("invalid_request_error", message)
        with self._lock:
            bound = dict(self.bound)
        checked = check_prefixes(body, bound, drop=behavior == "drop_block")
        if checked.refusal is not None:
            return body, [], error_body("invalid_request_error", checked.refusal)
        return {**body, "messages": checked.messages}, checked.dropped, None

    def _message(self, body: dict[str, Any], turn: Turn) -> dict[str, Any]:
        """The complete Message object for `turn`, signatures and ids filled in; each
        thinking block bound to its prefix (the request's, then the blocks before it)."""
        blocks = []
        has_thinking = False
        for block in turn.content:
            block = dict(block)
            if block["type"] == "thinking":
                has_thinking = True
                block.setdefault("signature", new_signature())
                with self._lock:
                    self.signed[block["signature"]] = block["thinking"]
            elif block["type"] == "redacted_thinking":
                has_thinking = True
                with self._lock:
                    self.signed[block["data"]] = ""
            elif block["type"] == "tool_use":
                block["id"] = block.get("id") or _random_id("toolu_01", 22)
                with self._lock:
                    self.thought_before[block["id"]] = has_thinking
            blocks.append(block)
        for block, digest in zip(blocks, reply_digests(body, blocks), strict=True):
            if block["type"] in ("thinking", "redacted_thinking"):
                with self._lock:
                    self.bound[binding_key(block)] = digest
        calls = any(b["type"] == "tool_use" for b in blocks)
        stop = turn.stop_reason or ("tool_use" if calls else "end_turn")
        output = max(1, _tokens(sum(_block_chars(b) for b in blocks)))
        usage: dict[str, Any] = {**self._input_usage(body), "output_tokens": output}
        usage |= turn.usage_override or {}
        return {
            "id": _random_id("msg_01", 22),
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def _input_usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """input / cache-creation / cache-read tokens, and the cache writes this request makes.

        Each breakpoint looks back up to 20 blocks for the longest prefix an earlier request
        wrote; the prefix up to the last breakpoint is written (creation) beyond what was read.
        """
        segments = _segments(body)
        ends, total = [], 0
        for segment in segments:
            total += segment.tokens
            ends.append(total)
        marks = [i for i, s in enumerate(segments) if s.breakpoint]
        read = 0
        with self._lock:
            for mark in marks:
                for i in range(mark, max(-1, mark - CACHE_LOOKBACK), -1):
                    if segments[i].digest in self._cache:
                        read = max(read, ends[i])
                        break
            written = 0
            for mark in marks:
                if ends[mark] >= MIN_CACHEABLE_TOKENS:
                    self._cache.add(segments[mark].digest)
                    written = max(written, ends[mark])
        creation = max(0, written - read)
        # Each written stretch is billed at the lifetime of the breakpoint that ends it.
        by_ttl, start = {"5m": 0, "1h": 0}, read
        for mark in marks:
            if ends[mark] > start and ends[mark] <= written:
                by_ttl[segments[mark].ttl] += ends[mark] - start
                start = ends[mark]
        return {
            "input_tokens": total - read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": by_ttl["5m"],
                "ephemeral_1h_input_tokens": by_ttl["1h"],
            },
            "service_tier": "standard",
        }

    # validation --------------------------------------------------------------------------

    def _validate(
        self, body: Any, headers: dict[str, str], *, need_max_tokens: bool
    ) -> dict[str, Any] | None:
        """The 400 Anthropic gives a malformed request, or None when it is well formed."""
        problem = _check_shape(body, need_max_tokens)
        if problem is None:
            betas = headers.get("anthropic-beta", "")
            problem = _check_messages(body["messages"], SYSTEM_ROLE_BETA in betas)
        if problem is None:
            problem = self._check_thinking(body)
        if problem is None:
            count = cache_breakpoints(body)
            if count > MAX_BREAKPOINTS:
                problem = (
                    f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                    f"Found {count}."
                )
        return None if problem is None else error_body("invalid_request_error", problem)

    def _check_thinking(self, body: dict[str, Any]) -> str | None:
        """Thinking must come back exactly as signed, and lead the tool loop in progress."""
        messages = body["messages"]
        for i, message in enumerate(messages):
            content = message.get("content")
            if message.get("role") != "assistant" or not isinstance(content, list):
                continue
            for j, block in enumerate(content):
                kind = block.get("type")
                with self._lock:
                    known = self.signed.get(block.get("signature") or block.get("data") or "")
                if kind == "thinking" and known != block.get("thinking"):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                if kind == "redacted_thinking" and known is None:
                    return f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
        thinking = body.get("thinking") or {}
        if thinking.get("type") not in ("enabled", "adaptive"):
            return None
        if self.checks_prefixes(body):
            # Models with preserved thinking accept a tool loop whose thinking was removed
            # (Anthropic's advice after a summary: "remove the thinking of the kept turns").
            return None
        turn = _last_tool_turn(messages)
        if turn is None:
            return None
        i, content = turn
        ids = [b.get("id") for b in content if b.get("type") == "tool_use"]
        with self._lock:
            thought = any(self.thought_before.get(call_id) for call_id in ids)
        first = content[0].get("type") if content else None
        if thought and first not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{first}`. When `thinking` is enabled, a final `assistant` message must "
                "start with a thinking block (preceeding the lastmost set of `tool_use` and "
                "`tool_result` blocks). We recommend you include thinking blocks from previous "
                "turns. To avoid this requirement, disable `thinking`. Please consult our "
                "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            )
        return None


def _check_shape(body: Any, need_max_tokens: bool) -> str | None:
    if not isinstance(body, dict):
        return "There was an issue with your request body. Please check the JSON is valid."
    if not isinstance(body.get("model"), str):
        return (
            "model: Field required"
            if "model" not in body
            else "model: Input should be a valid string"
        )
    if need_max_tokens and "max_tokens" not in body:
        return "max_tokens: Field required"
    if "messages" not in body:
        return "messages: Field required"
    if not isinstance(body["messages"], list):
        return "messages: Input should be a valid list"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid list"
    for n, block in enumerate(system if isinstance(system, list) else []):
        if not isinstance(block, dict) or block.get("type") != "text":
            return f"system.{n}.type: Input should be 'text'"
        if not isinstance(block.get("text"), str):
            return f"system.{n}.text: Field required"
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names = []
    for n, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return f"tools.{n}.name: Field required"
        custom = tool.get("type") in (None, "custom")
        if custom and not isinstance(tool.get("input_schema"), dict):
            return f"tools.{n}.custom.input_schema: Field required"
        names.append(tool["name"])
    if len(names) != len(set(names)):
        return "tools: Tool names must be unique."
    return None


def _check_messages(messages: list[Any], system_role: bool) -> str | None:
    """Roles, block shapes, and every tool_use answered by a tool_result in the next message.

    As Anthropic reads "immediately after", a call counts as answered only by the tool_result
    blocks that open the next user message, before any other block.
    """
    turns: list[tuple[int, dict[str, Any]]] = []  # user/assistant messages with their index
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be a valid dictionary"
        role, content = message.get("role"), message.get("content")
        if role == "system" and system_role:
            if not isinstance(content, str | list):
                return f"messages.{i}.content: Field required"
            continue
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        problem = _check_blocks(i, role, content, last=i == len(messages) - 1)
        if problem is not None:
            return problem
        turns.append((i, message))
    if not turns or turns[0][1]["role"] != "user":
        return 'messages: first message must use the "user" role'
    for position, (i, message) in enumerate(turns):
        if message["role"] == "user":
            before = turns[position - 1][1] if position else None
            offered = set(_ids(before, "tool_use", "id")) if before else set()
            for j, block in enumerate(
                message["content"] if isinstance(message["content"], list) else []
            ):
                if block["type"] == "tool_result" and block["tool_use_id"] not in offered:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block['tool_use_id']}. Each `tool_result` block "
                        "must have a corresponding `tool_use` block in the previous message."
                    )
            continue
        calls = _ids(message, "tool_use", "id")
        after = turns[position + 1][1] if position + 1 < len(turns) else None
        if calls and after is not None:
            answered = set(_leading_results(after))
            missing = [c for c in calls if c not in answered]
            if missing:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
    return None


def _check_blocks(i: int, role: str, content: Any, *, last: bool) -> str | None:
    """One user or assistant message's content."""
    if not isinstance(content, str | list):
        return f"messages.{i}.content: Field required"
    if not content and not (last and role == "assistant"):
        return (
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    for j, block in enumerate(content if isinstance(content, list) else []):
        where = f"messages.{i}.content.{j}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return f"{where}: Input should be a valid dictionary"
        kind = block["type"]
        if kind == "text" and not (isinstance(block.get("text"), str) and block["text"]):
            return "messages: text content blocks must be non-empty"
        if kind == "tool_result" and role != "user":
            return f"{where}: tool_result blocks are only allowed in user messages"
        if kind in ("tool_use", "thinking", "redacted_thinking") and role != "assistant":
            return f"{where}: {kind} blocks are only allowed in assistant messages"
        if kind == "tool_use" and not isinstance(block.get("id"), str):
            return f"{where}.tool_use.id: Field required"
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            return f"{where}.tool_result.tool_use_id: Field required"
    return None


def _ids(message: dict[str, Any], kind: str, key: str) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b[key] for b in content if isinstance(b, dict) and b.get("type") == kind]


def _leading_results(message: dict[str, Any]) -> list[str]:
    """The ids of the tool_result blocks that open a user message."""
    content = message.get("content")
    ids = []
    for block in content if isinstance(content, list) else []:
        if block.get("type") != "tool_result":
            break
        ids.append(block["tool_use_id"])
    return ids


def _last_tool_turn(messages: list[Any]) -> tuple[int, list[dict[str, Any]]] | None:
    """The assistant message of the tool loop in progress: the request ends in its results."""
    turns = [(i, m) for i, m in enumerate(messages) if m.get("role") in ("user", "assistant")]
    if len(turns) < 2 or turns[-1][1]["role"] != "user":
        return None
    if not _ids(turns[-1][1], "tool_result", "tool_use_id"):
        return None
    i, assistant = turns[-2]
    content = assistant.get("content")
    return (i, content) if isinstance(content, list) else None


def tool_pairing_errors(body: dict[str, Any]) -> list[str]:
    """Why a request's tool_use / tool_result pairing is invalid (empty when valid)."""
    problem = _check_messages(body.get("messages") or [], True)
    return [problem] if problem else []


# the event stream ------------------------------------------------------------------------


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return (
        f"event: {name}\ndata: ".encode()
        + json.dumps(data, separators=(",", ":")).encode()
        + b"\n\n"
    )


def _events(message: dict[str, Any], turn: Turn) -> list[bytes]:
    """`message` as Anthropic streams it."""
    usage = message["usage"]
    opening = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    opening["usage"] = {**usage, "output_tokens": 1}
    events = [_sse("message_start", {"type": "message_start", "message": opening})]
    size = turn.chunk_chars
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _chunks(block["text"], size)]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p} for p in _chunks(block["thinking"], size)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = json.dumps(block["input"], separators=(",", ":"))
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": p} for p in _chunks(arguments, size)
            ]
        else:  # redacted_thinking and server blocks arrive whole
            start, deltas = block, []
        start_event = {"type": "content_block_start", "index": index, "content_block": start}
        events.append(_sse("content_block_start", start_event))
        if index == 0:
            events.append(_sse("ping", {"type": "ping"}))
        for delta in deltas:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            events.append(_sse("content_block_delta", event))
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    final_usage = {k: v for k, v in usage.items() if k not in ("cache_creation", "service_tier")}
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(
        _sse("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage})
    )
    events.append(_sse("message_stop", {"type": "message_stop"}))
    if turn.stream_error is not None:
        error = _sse("error", error_body(**turn.stream_error))
        events = [*events[: turn.stream_error_after], error]
    return events
