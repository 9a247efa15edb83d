"""One client message from several upstream Messages rounds, streamed.

When the model calls the proxy's extract tool, the proxy answers and asks again, and the
client must still see one message: `message_start` from the first round only, extract
`tool_use` blocks hidden, block indices consecutive across rounds, and one closing
`message_delta` + `message_stop` carrying the last round's stop reason and the usage of all
rounds. `MessagesRelay` is the pipeline's `StreamRelay` (`proxy.wire.base`). The reply-side
helpers live in `proxy.wire.messages.reply` and are importable from here too. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.wire.base import Round
from proxy.wire.messages.bodies import is_extract_use
from proxy.wire.messages.reply import (
    TOKEN_FIELDS,
    UNFINISHED,
    as_round,
    client_stop_reason,
    needs_text,
    split_hidden,
)
from proxy.wire.messages.whole import whole_events
from proxy.wire.usage import MESSAGES, usage_sum

__all__ = ["MessagesRelay", "encode_event", "error_event", "stream_error"]


def encode_event(name: str, data: Any) -> bytes:
    """One named SSE event, as Anthropic writes them."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(type: str, message: str) -> bytes:
    """An `error` event, for a stream that breaks after it started."""
    return encode_event("error", {"type": "error", "error": {"type": type, "message": message}})


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
        self._last_errored = False
        self._reset()

    def _reset(self) -> None:
        self._message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
        self._blocks: dict[int, _Block] = {}
        self._delta: dict[str, Any] | None = None
        self._closing: list[bytes] = []  # the round's own message_delta / message_stop bytes
        self._errored = False  # the upstream sent an error event: the message ends there

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
        if kind == "error":
            self._errored = True
        return [raw]  # ping, error, and event types this proxy does not know

    def whole(self, raw: bytes) -> list[bytes]:
        """What to send for a whole Message the upstream sent as the answer to a stream
        request: the events Anthropic would have streamed, relayed like any round (a body
        that is not a message ends the stream with an `error` event)."""
        out: list[bytes] = []
        for name, data in whole_events(raw):
            out.extend(self.feed(name, orjson.dumps(data).decode(), encode_event(name, data)))
        return out

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
        rnd = as_round({**self._message, "content": [s.block for s in blocks]}, self.hide)
        self.rounds.append(rnd)
        self._last_closing, self._last_delta = self._closing, self._delta
        self._last_errored = self._errored
        self._reset()
        return rnd

    def finish(self, *, hidden_last: bool = False) -> list[bytes]:
        """The closing `message_delta` and `message_stop` of the client's one message.

        The stop reason is the last round's, "end_turn" instead of "tool_use" when that
        round's only calls were hidden (`hidden_last` says so too); usage is every round's.
        """
        if self._blocks or self._delta is not None or self._errored or not self.rounds:
            self.end_round()
        if self._last_errored and self._last_delta is None:
            return []  # the client already has the upstream's error: nothing follows it
        last = self.rounds[-1]
        reply: dict[str, Any] = last.raw
        reason = reply.get("stop_reason")
        if hidden_last and reason == "tool_use":
            reason = "end_turn"
        reason = client_stop_reason(reason, *split_hidden(reply.get("content") or [], self.hide))
        closing = self._last_closing
        if len(self.rounds) == 1 and reason == reply.get("stop_reason") and len(closing) == 2:
            return list(closing)  # one round, nothing changed: the upstream's own bytes
        out = []
        if reason != reply.get("stop_reason") and needs_text(self._last_kind):
            out = self._text_block(UNFINISHED)
        data = dict(self._last_delta or {"type": "message_delta"})
        delta = data.get("delta")
        data["delta"] = {
            **(delta if isinstance(delta, dict) else {"stop_sequence": None}),
            "stop_reason": reason,
        }
        usage = usage_sum([r.raw.get("usage") for r in self.rounds], MESSAGES)
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
