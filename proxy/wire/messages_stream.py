"""One client message from several upstream Messages rounds: stream relay, merge, usage.

When the model calls the proxy's extract tool, the proxy answers and asks again, and the
client must still see one message: `message_start` from the first round only, extract
`tool_use` blocks hidden, block indices consecutive across rounds, and one closing
`message_delta` + `message_stop` carrying the last round's stop reason and the usage of all
rounds. `merge_messages` does the same for non-streamed replies; `reply_round` reads one
reply as the pipeline's `Round` (`proxy.wire.base`). Pure: no I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.wire.base import Round, Usage
from proxy.wire.messages_blocks import reply_to_neutral
from proxy.wire.messages_request import is_extract_use

TOKEN_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
_NESTED_COUNTS = ("cache_creation", "server_tool_use")  # dicts of counts, summed by key


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def usage_total(usage: Any) -> int | None:
    """input + cache creation + cache read + output tokens: the size the trigger compares.

    None when the usage is missing or malformed (input or output not a count, or a cache
    field present but not a count).
    """
    if not isinstance(usage, dict):
        return None
    total = 0
    for name in TOKEN_FIELDS:
        value = usage.get(name)
        if value is None and name.startswith("cache_"):
            continue
        counted = _count(value)
        if counted is None:
            return None
        total += counted
    return total


def usage_of(usage: Any) -> Usage | None:
    """Messages usage as the trigger and the cost model read it (None when unreadable).

    The prompt is every input token, cached or not: Anthropic counts cache reads and cache
    writes apart from `input_tokens`.
    """
    total = usage_total(usage)
    if total is None:
        return None
    read = _count(usage.get("cache_read_input_tokens")) or 0
    written = _count(usage.get("cache_creation_input_tokens")) or 0
    prompt = usage["input_tokens"] + read + written
    return Usage(total=total, prompt=prompt, cached=read, output=usage["output_tokens"])


def usage_sum(usages: list[Any]) -> dict[str, Any] | None:
    """Several rounds' usage as one: token counts added, other fields from the last."""
    found = [u for u in usages if isinstance(u, dict)]
    if len(found) <= 1:
        return found[0] if found else None
    total = copy.deepcopy(found[-1])
    for name in TOKEN_FIELDS:
        if any(name in u for u in found):
            total[name] = sum(_count(u.get(name)) or 0 for u in found)
    for name in _NESTED_COUNTS:
        parts = [u[name] for u in found if isinstance(u.get(name), dict)]
        if parts:
            keys = dict.fromkeys(k for p in parts for k in p)
            total[name] = {
                k: sum(_count(p.get(k)) or 0 for p in parts)
                if all(_count(p.get(k)) is not None for p in parts if k in p)
                else parts[-1].get(k)
                for k in keys
            }
    return total


def encode_event(name: str, data: Any) -> bytes:
    """One named SSE event, as Anthropic writes them."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(type: str, message: str) -> bytes:
    """An `error` event, for a stream that breaks after it started."""
    return encode_event("error", {"type": "error", "error": {"type": type, "message": message}})


# Ends a turn that stopped on the proxy's own calls (its rounds ran out) with no text: an
# assistant message must not be empty nor end in a thinking block, or the client's next
# request would be refused.
UNFINISHED = "[Retrieving compacted tool results did not finish in this turn.]"
_THINKING = ("thinking", "redacted_thinking")


def _needs_text(last_kind: Any) -> bool:
    return last_kind is None or last_kind in _THINKING


def _stop_reason(reason: Any, content: list[Any], hidden: list[Any]) -> Any:
    """A turn whose only tool calls were the proxy's ends normally for the client."""
    visible = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    return "end_turn" if reason == "tool_use" and hidden and not visible else reason


def merge_messages(rounds: list[dict[str, Any]], hide: bool = True) -> dict[str, Any]:
    """Non-streamed rounds as the one message the client sees (`id` of the first)."""
    if not rounds:
        raise ValueError("merge_messages needs at least one round")
    parts = [_split(r.get("content") or [], hide) for r in rounds]
    if len(rounds) == 1 and not parts[0][1]:
        return rounds[0]
    last = rounds[-1]
    merged = {**rounds[0], "content": [b for visible, _ in parts for b in visible]}
    for name in ("stop_reason", "stop_sequence", "stop_details", "container"):
        if name in last:
            merged[name] = last[name]
    merged["stop_reason"] = _stop_reason(merged.get("stop_reason"), *parts[-1])
    content = merged["content"]
    if merged["stop_reason"] != last.get("stop_reason") and _needs_text(
        content[-1].get("type") if content and isinstance(content[-1], dict) else None
    ):
        merged["content"] = [*content, {"type": "text", "text": UNFINISHED}]
    usage = usage_sum([r.get("usage") for r in rounds])
    if usage is not None:
        merged["usage"] = usage
    return merged


class UnreadableReply(ValueError):
    """An upstream reply that is not a Messages `message` (no content list)."""


def _split(content: list[Any], hide: bool) -> tuple[list[Any], list[Any]]:
    """(the blocks the client sees, the proxy's extract calls)."""
    hidden = [b for b in content if hide and is_extract_use(b)]
    return [b for b in content if not any(b is h for h in hidden)], hidden


def _round(reply: dict[str, Any], hide: bool = True) -> Round:
    visible, hidden = _split(reply.get("content") or [], hide)
    own_calls = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in visible)
    only = reply.get("stop_reason") == "tool_use" and bool(hidden) and not own_calls
    return Round(
        message=reply_to_neutral(reply),
        usage=usage_of(reply.get("usage")),
        only_extract=only,
        raw=reply,
    )


def reply_round(data: Any) -> Round:
    """A non-streamed reply as the pipeline's round: neutral message, usage, the reply itself."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise UnreadableReply("the reply has no content list")
    return _round(data)


def client_reply(rounds: list[Round], *, injected: bool) -> dict[str, Any]:
    """The one reply the client sees for non-streamed rounds."""
    return merge_messages([r.raw for r in rounds], hide=injected)


_FINISH = {"max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}


def summary_reply(data: Any) -> dict[str, Any]:
    """A reply to a summary request as the Chat Completions completion the summariser reads."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise UnreadableReply("the reply has no content list")
    text = "".join(
        b["text"]
        for b in data["content"]
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": _FINISH.get(str(data.get("stop_reason")), "stop"),
    }
    completion: dict[str, Any] = {
        "id": data.get("id"),
        "object": "chat.completion",
        "model": data.get("model"),
        "choices": [choice],
    }
    usage = usage_of(data.get("usage"))
    if usage is not None:
        completion["usage"] = {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.output,
            "total_tokens": usage.total,
        }
    return completion


@dataclass
class _Block:
    block: dict[str, Any]
    client_index: int | None  # None: hidden
    partial_json: list[str] = field(default_factory=list)


class MessagesRelay:
    """Relays the events of one or more upstream rounds as one client stream.

    `feed` each parsed event (name, data, raw bytes) and send what it returns; at the end of
    an upstream stream call `end_round` and decide: another round (feed it into the same
    relay) or `finish`, which returns the closing `message_delta` + `message_stop`.
    """

    def __init__(self, *, hide: bool = True) -> None:
        self.hide = hide
        self.rounds: list[Round] = []
        self.started = False  # message_start sent to the client
        self._next_index = 0
        self._last_kind: Any = None  # type of the last block the client was sent
        self._last_closing: list[bytes] = []
        self._last_delta: dict[str, Any] | None = None
        self._reset()

    def _reset(self) -> None:
        self._message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
        self._blocks: dict[int, _Block] = {}
        self._delta: dict[str, Any] | None = None
        self._closing: list[bytes] = []  # the round's own message_delta / message_stop bytes

    def feed(self, event: str | None, data: str | None, raw: bytes) -> list[bytes]:
        """The bytes to send the client now for one upstream event (maybe none)."""
        if data is None:
            return [raw]  # comments, keep-alives
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [raw]
        if not isinstance(parsed, dict):
            return [raw]
        kind = parsed.get("type") or event
        name = event or str(kind)
        if kind == "message_start":
            return self._start(parsed, raw)
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self._block_event(str(kind), name, parsed, raw)
        if kind == "message_delta":
            self._on_delta(parsed)
            self._closing.append(raw)
            return []
        if kind == "message_stop":
            self._closing.append(raw)
            return []
        return [raw]  # ping, error, and event types this proxy does not know

    def _start(self, data: dict[str, Any], raw: bytes) -> list[bytes]:
        message = data.get("message")
        if isinstance(message, dict):
            self._message = {**message, "content": []}
        if self.started:
            return []
        self.started = True
        return [raw]

    def _block_event(self, kind: str, name: str, data: dict[str, Any], raw: bytes) -> list[bytes]:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            return [raw]
        if kind == "content_block_start":
            block = data.get("content_block")
            block = dict(block) if isinstance(block, dict) else {}
            client_index = None
            if not (self.hide and is_extract_use(block)):
                client_index = self._next_index
                self._next_index += 1
                self._last_kind = block.get("type")
            self._blocks[index] = _Block(block, client_index)
        slot = self._blocks.get(index)
        if slot is None:
            return [raw]  # a block this round never started: not ours to judge
        if kind == "content_block_delta":
            _apply_delta(slot, data.get("delta"))
        if slot.client_index is None:
            return []
        if slot.client_index == index:
            return [raw]
        return [encode_event(name, {**data, "index": slot.client_index})]

    def _on_delta(self, data: dict[str, Any]) -> None:
        self._delta = data
        delta = data.get("delta")
        if isinstance(delta, dict):
            self._message.update(delta)
        usage = data.get("usage")
        if isinstance(usage, dict):
            current = self._message.get("usage")
            merged = dict(current) if isinstance(current, dict) else {}
            merged.update({k: v for k, v in usage.items() if v is not None})
            self._message["usage"] = merged

    def end_round(self) -> Round:
        """Close the round fed so far: its reply as a whole message (`raw`), hidden calls
        included, and that reply in neutral form; the next `feed` starts a new round."""
        blocks = [self._blocks[i] for i in sorted(self._blocks)]
        for slot in blocks:
            _finish_input(slot)
        rnd = _round({**self._message, "content": [s.block for s in blocks]}, self.hide)
        self.rounds.append(rnd)
        self._last_closing, self._last_delta = self._closing, self._delta
        self._reset()
        return rnd

    def finish(self, *, hidden_last: bool = False) -> list[bytes]:
        """The closing `message_delta` and `message_stop` of the client's one message.

        The stop reason is the last round's, "end_turn" instead of "tool_use" when that
        round's only calls were hidden (`hidden_last` says so too); usage is every round's.
        """
        if self._blocks or self._delta is not None or not self.rounds:
            self.end_round()
        last = self.rounds[-1]
        reply: dict[str, Any] = last.raw
        reason = reply.get("stop_reason")
        if hidden_last and reason == "tool_use":
            reason = "end_turn"
        reason = _stop_reason(reason, *_split(reply.get("content") or [], self.hide))
        closing = self._last_closing
        if len(self.rounds) == 1 and reason == reply.get("stop_reason") and len(closing) == 2:
            return list(closing)  # one round, nothing changed: the upstream's own bytes
        out = []
        if reason != reply.get("stop_reason") and _needs_text(self._last_kind):
            out = self._text_block(UNFINISHED)
        data = dict(self._last_delta or {"type": "message_delta"})
        delta = data.get("delta")
        data["delta"] = {
            **(delta if isinstance(delta, dict) else {"stop_sequence": None}),
            "stop_reason": reason,
        }
        usage = usage_sum([r.raw.get("usage") for r in self.rounds])
        if usage is not None:
            earlier = data.get("usage")
            # message_delta's usage is cumulative: the totals of every round, as one message.
            data["usage"] = {
                **(earlier if isinstance(earlier, dict) else {}),
                **{k: v for k, v in usage.items() if k in (*TOKEN_FIELDS, "server_tool_use")},
            }
        return [
            *out,
            encode_event("message_delta", data),
            encode_event("message_stop", {"type": "message_stop"}),
        ]

    def _text_block(self, text: str) -> list[bytes]:
        index, self._next_index = self._next_index, self._next_index + 1
        self._last_kind = "text"
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": text}
        return [
            encode_event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            ),
            encode_event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            ),
            encode_event("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]

    def error(self, body: Any, detail: str | None = None) -> bytes:
        """An in-stream `error` event: the upstream's own error when it sent one."""
        return stream_error(body, detail)


def stream_error(body: Any, detail: str | None = None) -> bytes:
    """An `error` event for a stream that broke: the upstream's error object, else ours."""
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            body = orjson.loads(bytes(body))
        except orjson.JSONDecodeError:
            body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return encode_event("error", {"type": "error", "error": body["error"]})
    message = "The upstream connection failed during the stream"
    return error_event("api_error", f"{message} ({detail})" if detail else message)


def _apply_delta(slot: _Block, delta: Any) -> None:
    if not isinstance(delta, dict):
        return
    block, kind = slot.block, delta.get("type")
    if kind == "text_delta":
        block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
    elif kind == "thinking_delta":
        block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
    elif kind == "signature_delta":
        block["signature"] = str(block.get("signature") or "") + str(delta.get("signature") or "")
    elif kind == "input_json_delta":
        slot.partial_json.append(str(delta.get("partial_json") or ""))
    elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
        citations = block.get("citations")
        block["citations"] = [
            *(citations if isinstance(citations, list) else ()),
            delta["citation"],
        ]


def _finish_input(slot: _Block) -> None:
    text = "".join(slot.partial_json)
    if not text:
        return
    try:
        slot.block["input"] = orjson.loads(text)
    except orjson.JSONDecodeError:
        slot.block["input"] = {}  # a stream cut inside the arguments
