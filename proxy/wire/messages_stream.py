"""One client message from several upstream Messages rounds: stream relay, merge, usage.

When the model calls the proxy's extract tool, the proxy answers and asks again, and the
client must still see one message: `message_start` from the first round only, extract
`tool_use` blocks hidden, block indices consecutive across rounds, and one closing
`message_delta` + `message_stop` carrying the last round's stop reason and the usage of all
rounds. `merge_messages` does the same for non-streamed replies. Pure: no I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson

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


def _stop_reason(reason: Any, content: list[Any], hidden: list[Any]) -> Any:
    """A turn whose only tool calls were the proxy's ends normally for the client."""
    visible = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    return "end_turn" if reason == "tool_use" and hidden and not visible else reason


def merge_messages(rounds: list[dict[str, Any]], hide: bool = True) -> dict[str, Any]:
    """Non-streamed rounds as the one message the client sees (`id` of the first)."""
    if not rounds:
        raise ValueError("merge_messages needs at least one round")
    hidden = [b for r in rounds for b in r.get("content") or [] if hide and is_extract_use(b)]
    if len(rounds) == 1 and not hidden:
        return rounds[0]
    content = [b for r in rounds for b in r.get("content") or [] if not any(b is h for h in hidden)]
    last = rounds[-1]
    merged = {**rounds[0], "content": content}
    for name in ("stop_reason", "stop_sequence", "stop_details", "container"):
        if name in last:
            merged[name] = last[name]
    last_content = last.get("content") or []
    last_visible = [b for b in last_content if not any(b is h for h in hidden)]
    last_hidden = [b for b in last_content if any(b is h for h in hidden)]
    merged["stop_reason"] = _stop_reason(merged.get("stop_reason"), last_visible, last_hidden)
    usage = usage_sum([r.get("usage") for r in rounds])
    if usage is not None:
        merged["usage"] = usage
    return merged


@dataclass
class Round:
    """What one upstream round said: its reply as a whole message, and its hidden calls."""

    message: dict[str, Any]
    hidden: list[dict[str, Any]]
    visible: list[dict[str, Any]]

    @property
    def content(self) -> list[dict[str, Any]]:
        """Every block of the round, hidden extract calls included, in upstream order."""
        content: list[dict[str, Any]] = self.message.get("content") or []
        return content

    @property
    def usage(self) -> dict[str, Any] | None:
        usage = self.message.get("usage")
        return usage if isinstance(usage, dict) else None

    @property
    def stop_reason(self) -> Any:
        return self.message.get("stop_reason")

    @property
    def only_extract(self) -> bool:
        """The round ended asking for extract results and nothing the client must answer."""
        own_calls = any(b.get("type") == "tool_use" for b in self.visible)
        return self.stop_reason == "tool_use" and bool(self.hidden) and not own_calls


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
        """Close the round fed so far: its reply as a message, with its hidden calls."""
        blocks = [self._blocks[i] for i in sorted(self._blocks)]
        for slot in blocks:
            _finish_input(slot)
        message = {**self._message, "content": [s.block for s in blocks]}
        rnd = Round(
            message=message,
            hidden=[s.block for s in blocks if s.client_index is None],
            visible=[s.block for s in blocks if s.client_index is not None],
        )
        rnd_closing, rnd_delta = self._closing, self._delta
        self.rounds.append(rnd)
        self._reset()
        self._last_closing, self._last_delta = rnd_closing, rnd_delta
        return rnd

    def finish(self) -> bytes:
        """The closing `message_delta` and `message_stop` of the client's one message."""
        if self._blocks or self._delta is not None or not self.rounds:
            self.end_round()
        last = self.rounds[-1]
        reason = _stop_reason(last.stop_reason, last.visible, last.hidden)
        single = len(self.rounds) == 1 and reason == last.stop_reason
        closing = self._last_closing
        if single and self._last_delta is not None and len(closing) == 2:
            return b"".join(closing)  # one round, nothing changed: the upstream's own bytes
        data = dict(self._last_delta or {"type": "message_delta"})
        delta = data.get("delta")
        data["delta"] = {
            **(delta if isinstance(delta, dict) else {"stop_sequence": None}),
            "stop_reason": reason,
        }
        usage = usage_sum([r.usage for r in self.rounds])
        if usage is not None:
            earlier = data.get("usage")
            # message_delta's usage is cumulative: the totals of every round, as one message.
            data["usage"] = {
                **(earlier if isinstance(earlier, dict) else {}),
                **{k: v for k, v in usage.items() if k in (*TOKEN_FIELDS, "server_tool_use")},
            }
        return encode_event("message_delta", data) + encode_event(
            "message_stop", {"type": "message_stop"}
        )


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
