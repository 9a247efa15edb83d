"""The providers' own compaction, added to the fake Responses and Messages APIs.

`CompactingResponses` is `tests.support.fake_responses.FakeResponses` that also compacts as OpenAI's
Responses API does (types of openai-python 3.57: `ResponseCompactionItem`,
`CompactionTrigger`, `ResponseCompactionCompactingEvent`, `context_management`):

- `context_management: [{"type": "compaction", "compact_threshold": N}]`: when the input
  counts more than N tokens, the output opens with a `compaction` item (`id`,
  `encrypted_content`, `created_by`), then the model's answer;
- a last input item `{"type": "compaction_trigger"}`: the output is the `compaction` item
  alone; a trigger anywhere else is refused (400);
- a `compaction` item in `input` must carry `encrypted_content` this server issued (400
  `invalid_encrypted_content` otherwise); what comes before the latest one is not read;
- streamed, the item is `response.output_item.added` (its `encrypted_content` still empty),
  `response.compaction.compacting`, `response.output_item.done`.

`CompactingMessages` is `tests.support.fake_messages.FakeMessages` that also compacts as Anthropic's
Messages API does (anthropic-sdk-python 2.15 beta types: `BetaCompactionBlock`,
`BetaCompactionConfigParam`, `BetaContextManagementConfigParam`, `BetaCompactionIterationUsage`):

- on-demand `compaction: {"type": "summarize"}` (beta `compact-2026-09-04`): the answer is
  one signed `compaction` block, `stop_reason: "compaction"`, nothing sampled after it;
- `context_management.edits` (beta `context-management-2025-06-27` for `clear_tool_uses_20250919`
  and `clear_thinking_20251015`, `compact-2026-01-12` for `compact_20260112`): past the compact
  edit's `trigger` (default 150000 input tokens) the answer opens with a `compaction` block
  (alone, `stop_reason: "compaction"`, with `pause_after_compaction`); the reply's
  `context_management.applied_edits` lists the clearing edits that applied, and
  `usage.iterations` the compaction's own usage beside the message's;
- a `compaction` block sent back must be one this server signed, unchanged (400 otherwise);
  the messages before the last one are not read (the conversation starts at it);
- streamed, the block starts with its `signature` and arrives in one `compaction_delta`, and
  `message_delta` carries `context_management`.

Every request is recorded as by the base fakes (`responses_requests`, `messages_requests`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tests.support.fake_messages import (
    FakeMessages,
    Turn,
    _events,
    block_text,
    count_input_tokens,
    error_body,
    new_signature,
)
from tests.support.fake_responses import (
    FakeResponses,
    ResponsesRequest,
    _encrypted_blob,
    _Rendered,
    sse_bytes,
)
from tests.support.fake_responses import Turn as ResponsesTurn
from tests.support.fake_upstream import Reply, _error_body, _random_id, _stream_parts

COMPACT_BETA = "compact-2026-01-12"
SUMMARIZE_BETA = "compact-2026-09-04"
CONTEXT_BETA = "context-management-2025-06-27"
DEFAULT_COMPACT_TRIGGER = 150_000
SUMMARY_TEXT = "Summary of the conversation so far: the files read and what they held."


# --- Responses ------------------------------------------------------------------------------


class CompactingResponses(FakeResponses):
    """The fake Responses API with OpenAI's server-side and triggered compaction."""

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.compactions: dict[str, str] = {}  # compaction item id -> encrypted_content
            self.sent: list[Any] = []  # each answer: the response object, or its event list

    def _compaction_item(self) -> dict[str, Any]:
        item = {
            "id": _random_id("cmp_", 48),
            "type": "compaction",
            "encrypted_content": _encrypted_blob(),
            "created_by": "server",
        }
        with self._lock:
            self.compactions[item["id"]] = item["encrypted_content"]
        return item

    def _refusal(
        self, body: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or not isinstance(body.get("input"), list):
            return super()._refusal(body)
        managed = body.get("context_management")
        if managed is not None:
            entries = managed if isinstance(managed, list) else [None]
            for n, entry in enumerate(entries):
                if not isinstance(entry, dict) or entry.get("type") != "compaction":
                    message = f"Invalid value for 'context_management[{n}].type'."
                    param = f"context_management[{n}].type"
                    return 400, _error_body(message, "invalid_request_error", param, None)
        items = body["input"]
        kept: list[Any] = []
        for n, item in enumerate(items):
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "compaction_trigger" and n != len(items) - 1:
                message = "A compaction_trigger item must be the final input item."
                return 400, _error_body(message, "invalid_request_error", f"input[{n}]", None)
            if kind == "compaction":
                with self._lock:
                    issued = self.compactions.get(str(item.get("id")))
                if issued is None or item.get("encrypted_content") != issued:
                    message = (
                        f"The encrypted content for item {item.get('id')} could not be "
                        "verified. Reason: Encrypted content could not be decrypted or parsed."
                    )
                    return 400, _error_body(
                        message, "invalid_request_error", None, "invalid_encrypted_content"
                    )
                kept = [item]  # the latest compaction item carries everything before it
            elif kind != "compaction_trigger":
                kept.append(item)
        checked = super()._refusal({**body, "input": kept})
        if isinstance(checked[0], int):
            return checked
        return body, checked[1]

    async def _responses(self, request: Request) -> Response:
        record = await self._record(request)
        checked = self._refusal(record.json)
        if isinstance(checked[0], int):
            return self._json(record, checked[0], checked[1])
        body, items = checked
        tokens = self.input_tokens(body, items)
        last = body["input"][-1] if body["input"] else {}
        triggered = isinstance(last, dict) and last.get("type") == "compaction_trigger"
        threshold = next(
            (
                e.get("compact_threshold")
                for e in body.get("context_management") or []
                if isinstance(e.get("compact_threshold"), int)
            ),
            None,
        )
        compacts = triggered or (threshold is not None and tokens > threshold)
        if triggered:
            turn = ResponsesTurn(reasoning_tokens=0)
        else:
            turn = self._next_turn(ResponsesRequest(body, items, record.headers))
        if turn.status != 200:
            return self._json(record, turn.status, {"error": turn.error})
        usage = {"input_tokens": tokens, "cached_tokens": self._cached_tokens(body, items)}
        rendered = _Rendered(self, body, turn, usage)
        answer = list(rendered.output)
        if compacts:
            rendered.output = [self._compaction_item(), *answer]
        rendered.response = rendered._response(usage)
        with self._lock:
            self._answers[id(record)] = rendered.response
        if not body.get("stream"):
            with self._lock:
                self.sent.append(rendered.response)
            return self._json(record, 200, rendered.response)
        events = _compaction_events(rendered, answer) if compacts else rendered.events()
        raw = sse_bytes(events)
        with self._lock:
            self.sent.append([json.loads(e.split(b"data: ", 1)[1]) for e in raw])
        return self._stream(record, self._headers(), _stream_parts(Reply(), raw, -1))


def _compaction_events(rendered: _Rendered, answer: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stream of a response whose output opens with a compaction item."""
    whole, item = rendered.response, rendered.output[0]
    rendered.output = answer
    rendered.response = {**whole, "output": answer}
    rest = rendered.events()
    rendered.output, rendered.response = [item, *answer], whole
    opened = {**item, "encrypted_content": ""}
    at = {"item_id": item["id"], "output_index": 0}
    own = [
        ("response.output_item.added", {"output_index": 0, "item": opened}),
        ("response.compaction.compacting", at),
        ("response.output_item.done", {"output_index": 0, "item": item}),
    ]
    shifted = [
        (
            name,
            {**data, "output_index": data["output_index"] + 1} if "output_index" in data else data,
        )
        for name, data in rest[2:-1]
    ]
    return [*rest[:2], *own, *shifted, ("response.completed", {"response": whole})]


# --- Messages -------------------------------------------------------------------------------


def _betas(headers: dict[str, str]) -> set[str]:
    return {b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()}


def _edits(body: dict[str, Any]) -> list[dict[str, Any]]:
    managed = body.get("context_management")
    edits = managed.get("edits") if isinstance(managed, dict) else None
    return [e for e in edits or [] if isinstance(e, dict)]


def _last_compaction(messages: list[Any]) -> tuple[int, int] | None:
    """(message, block) of the last `compaction` block, if any."""
    found = None
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if isinstance(block, dict) and block.get("type") == "compaction":
                found = (i, j)
    return found


def effective(body: dict[str, Any]) -> dict[str, Any]:
    """What the model reads of a request: the conversation from its last compaction block on
    (the block's summary as the opening user turn, the blocks after it as the reply)."""
    messages = body.get("messages")
    at = _last_compaction(messages) if isinstance(messages, list) else None
    if at is None:
        return body
    i, j = at
    block = messages[i]["content"][j]
    summary = block.get("content") or "(no summary)"
    opening: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": summary}]}
    ]
    after = messages[i]["content"][j + 1 :]
    if after:
        opening.append({"role": "assistant", "content": after})
    return {**body, "messages": [*opening, *messages[i + 1 :]]}


class CompactingMessages(FakeMessages):
    """The fake Messages API with Anthropic's compaction and context editing."""

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.compaction_signed: dict[str, str | None] = {}  # signature -> content
            self.sent: list[Any] = []  # each answer: the message, or its event list

    def input_tokens(self, body: dict[str, Any]) -> int:
        return count_input_tokens(effective(body))

    def _validate(
        self, body: Any, headers: dict[str, str], *, need_max_tokens: bool
    ) -> dict[str, Any] | None:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return super()._validate(body, headers, need_max_tokens=need_max_tokens)
        betas = _betas(headers)
        problem = None
        if body.get("compaction") is not None:
            config = body["compaction"]
            if SUMMARIZE_BETA not in betas:
                problem = "compaction: Extra inputs are not permitted"
            elif not isinstance(config, dict) or config.get("type") != "summarize":
                problem = "compaction.type: Input should be 'summarize'"
            elif body.get("context_management") is not None:
                problem = "compaction: cannot be combined with context_management"
        for n, edit in enumerate(_edits(body)):
            kind = edit.get("type")
            need = COMPACT_BETA if kind == "compact_20260112" else CONTEXT_BETA
            known = ("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112")
            if kind not in known:
                problem = problem or f"context_management.edits.{n}.type: Input tag is invalid"
            elif need not in betas:
                problem = problem or "context_management: Extra inputs are not permitted"
        for i, message in enumerate(body["messages"]):
            content = message.get("content") if isinstance(message, dict) else None
            for j, block in enumerate(content if isinstance(content, list) else []):
                if not isinstance(block, dict) or block.get("type") != "compaction":
                    continue
                with self._lock:
                    signed = block.get("signature") in self.compaction_signed
                    content_signed = self.compaction_signed.get(block.get("signature") or "")
                where = f"messages.{i}.content.{j}"
                if message.get("role") != "assistant":
                    problem = (
                        problem
                        or f"{where}: compaction blocks are only allowed in assistant messages"
                    )
                elif not signed or content_signed != block.get("content"):
                    problem = problem or f"{where}: Invalid `signature` in `compaction` block"
        if problem is not None:
            return error_body("invalid_request_error", problem)
        return super()._validate(effective(body), headers, need_max_tokens=need_max_tokens)

    def _signed_compaction(self) -> dict[str, Any]:
        block = {"type": "compaction", "content": SUMMARY_TEXT, "signature": new_signature()}
        with self._lock:
            self.compaction_signed[block["signature"]] = block["content"]
        return block

    async def _messages(self, request: Request) -> Response:
        record = await self._record(request)
        body = record.json
        invalid = self._validate(body, record.headers, need_max_tokens=True)
        if invalid is not None:
            return self._anthropic_json(record, 400, invalid)
        tokens = self.input_tokens(body)
        compact = next((e for e in _edits(body) if e.get("type") == "compact_20260112"), None)
        trigger = (compact or {}).get("trigger") or {}
        over = compact is not None and tokens > int(trigger.get("value", DEFAULT_COMPACT_TRIGGER))
        summarize = body.get("compaction") is not None
        pause = summarize or (over and bool((compact or {}).get("pause_after_compaction")))
        turn = Turn(content=[]) if pause else self._next_turn(body)
        if turn.status != 200 or turn.error is not None:
            error = error_body(**(turn.error or {"type": "api_error", "message": "error"}))
            return self._anthropic_json(record, turn.status, error, turn)
        message = self._message(body, turn)
        if summarize or over:
            block = self._signed_compaction()
            message["content"] = [block, *message["content"]]
            iteration = {
                "type": "compaction",
                "input_tokens": tokens,
                "output_tokens": len(block_text([block])) // 4 + 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
            usage = message["usage"]
            own = {
                "type": "message",
                "input_tokens": usage["input_tokens"],
                "output_tokens": usage["output_tokens"],
                "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
                "cache_read_input_tokens": usage["cache_read_input_tokens"],
            }
            usage["iterations"] = [iteration] if pause else [iteration, own]
            if pause:
                message["stop_reason"] = "compaction"
        applied = _applied_edits(body, tokens)
        if applied is not None:
            message["context_management"] = {"applied_edits": applied}
        if not body.get("stream"):
            with self._lock:
                self.sent.append(message)
            return self._anthropic_json(record, 200, message, turn)
        events = _with_compaction_stream(_events(message, turn), message)
        with self._lock:
            self.sent.append([json.loads(e.split(b"data: ", 1)[1]) for e in events])
        headers = self._anthropic_headers(turn)
        return self._stream(record, headers, _stream_parts(turn, events, 0))  # type: ignore[arg-type]


def _applied_edits(body: dict[str, Any], tokens: int) -> list[dict[str, Any]] | None:
    """The clearing edits that applied to this request (None when it asked for none)."""
    edits = [e for e in _edits(body) if e.get("type") != "compact_20260112"]
    if not edits:
        return None
    applied = []
    for edit in edits:
        trigger = edit.get("trigger") or {}
        if tokens <= int(trigger.get("value", 100_000)):
            continue
        if edit["type"] == "clear_tool_uses_20250919":
            uses = sum(
                1
                for m in body["messages"]
                for b in (m.get("content") if isinstance(m.get("content"), list) else [])
                if isinstance(b, dict) and b.get("type") == "tool_use"
            )
            keep = int((edit.get("keep") or {}).get("value", 3))
            cleared = max(0, uses - keep)
            applied.append(
                {
                    "type": "clear_tool_uses_20250919",
                    "cleared_tool_uses": cleared,
                    "cleared_input_tokens": cleared * 500,
                }
            )
        else:
            applied.append(
                {
                    "type": "clear_thinking_20251015",
                    "cleared_thinking_turns": 1,
                    "cleared_input_tokens": 200,
                }
            )
    return applied


def _with_compaction_stream(events: list[bytes], message: dict[str, Any]) -> list[bytes]:
    """The base stream with the compaction block as Anthropic streams it (its signature at
    the start, its summary in one `compaction_delta`) and `context_management` on
    `message_delta`."""
    out: list[bytes] = []
    for raw in events:
        data = raw.decode().partition("\ndata: ")[2]
        event = json.loads(data)
        kind = event.get("type")
        if kind == "content_block_start" and event["content_block"].get("type") == "compaction":
            block = event["content_block"]
            event["content_block"] = {
                "type": "compaction",
                "content": None,
                "signature": block["signature"],
            }
            out.append(_sse(event))
            delta = {
                "type": "compaction_delta",
                "content": block["content"],
                "encrypted_content": None,
            }
            out.append(
                _sse({"type": "content_block_delta", "index": event["index"], "delta": delta})
            )
            continue
        if kind == "message_delta":
            if "context_management" in message:
                event["context_management"] = message["context_management"]
            if "iterations" in message["usage"]:
                event["usage"]["iterations"] = message["usage"]["iterations"]
        if kind == "message_start":
            event["message"].pop("context_management", None)
        out.append(_sse(event))
    return out


def _sse(data: dict[str, Any]) -> bytes:
    return (
        f"event: {data['type']}\ndata: ".encode()
        + json.dumps(data, separators=(",", ":")).encode()
        + b"\n\n"
    )
