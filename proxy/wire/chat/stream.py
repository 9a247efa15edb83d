"""A Chat Completions stream spanning several upstream rounds, relayed as one completion.

The proxy answers the model's `extract_compacted_tool_result` calls itself and asks upstream
again, yet the client must see one completion. `StreamRound` filters the chunks of one round:
extract calls hidden, tool-call deltas renumbered from index 0 among the client's own calls,
the role sent in the first round only; it tells whether a round ended in extract calls only,
so the proxy must answer them and ask upstream again. `ChatRelay` is the pipeline's
`StreamRelay` (`proxy.wire.base`): a closing chunk when the rounds ran out on a hidden one, one
usage chunk summed over all rounds when the client asked for usage, then one `[DONE]`. Pure: no
I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.wire.base import JSON, Round
from proxy.wire.chat.checks import check_chunk
from proxy.wire.chat.reply import usage_of
from proxy.wire.chat.whole import relay_completion
from proxy.wire.sse import DONE, ChunkAccumulator, encode_data
from proxy.wire.usage import CHAT, usage_sum


@dataclass
class _Slot:
    call_id: str | None
    extract: bool
    client_index: int | None


@dataclass
class StreamRound:
    """Filters the chunks of one streamed upstream round; accumulates the full message."""

    chunk_id: str | None = None
    first_round: bool = True
    keep_usage_field: bool = False
    accumulator: ChunkAccumulator = field(default_factory=ChunkAccumulator)
    _slots: dict[int, _Slot] = field(default_factory=dict)
    _last_index: int | None = None
    _visible_calls: int = 0
    _extract_calls: int = 0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    # The round's last chunk came: [DONE], or the usage-only chunk after the finish reason
    # (which OpenAI sends last, before [DONE]).
    complete: bool = False

    @property
    def only_extract(self) -> bool:
        """The round asked for extract results and nothing the client must see."""
        return (
            self.finish_reason == "tool_calls"
            and self._extract_calls > 0
            and (self._visible_calls == 0)
        )

    def _slot(self, delta: dict[str, Any]) -> _Slot:
        index = delta.get("index")
        call_id = delta.get("id")
        if not isinstance(index, int):
            # Some servers omit the index: match by id, else continue the last call.
            match = next(
                (i for i, s in self._slots.items() if call_id and s.call_id == call_id), None
            )
            index = match if match is not None else self._last_index
            if index is None or (call_id and self._slots[index].call_id not in (None, call_id)):
                index = max(self._slots, default=-1) + 1
        slot = self._slots.get(index)
        if slot is not None and call_id and slot.call_id not in (None, call_id):
            # Parallel calls reusing index 0 with new ids: a new call, not a continuation.
            self._slots[1000 + len(self._slots)] = slot
            slot = None
        if slot is None:
            fn = delta.get("function") or {}
            extract = fn.get("name") == EXTRACT_TOOL_NAME
            client_index = None
            if not extract:
                client_index = self._visible_calls
                self._visible_calls += 1
            else:
                self._extract_calls += 1
            slot = self._slots[index] = _Slot(call_id, extract, client_index)
        elif call_id and slot.call_id is None:
            slot.call_id = call_id
        self._last_index = index
        return slot

    def feed(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        """The chunk to send the client, or None when nothing of it is for the client.

        Raises UpstreamInvalidResponse for a chunk whose choices, deltas or tool calls have
        the wrong type; a `usage` that is not an object is ignored.
        """
        check_chunk(chunk)
        self.accumulator.add(chunk)
        if chunk.get("usage") and isinstance(chunk["usage"], dict):
            self.usage = chunk["usage"]
        if self.chunk_id is None:
            self.chunk_id = chunk.get("id")
        choices = chunk.get("choices")
        if not choices:
            if isinstance(chunk.get("usage"), dict) and self.finish_reason is not None:
                self.complete = True
            return None  # the usage-only chunk: the caller sends one at the very end
        out = dict(chunk)
        if self.chunk_id:
            out["id"] = self.chunk_id
        if not self.keep_usage_field:
            out.pop("usage", None)
        new_choices = []
        for choice in choices:
            kept = self._filter_choice(choice)
            if kept is not None:
                new_choices.append(kept)
        if not new_choices:
            return None
        out["choices"] = new_choices
        return out

    def _filter_choice(self, choice: dict[str, Any]) -> dict[str, Any] | None:
        choice = dict(choice)
        delta = dict(choice.get("delta") or {})
        if "tool_calls" in delta:
            calls = []
            for tc in delta.get("tool_calls") or []:
                slot = self._slot(tc)
                if slot.extract:
                    continue
                calls.append({**tc, "index": slot.client_index})
            if calls:
                delta["tool_calls"] = calls
            else:
                delta.pop("tool_calls")
        if not self.first_round:
            delta.pop("role", None)
        finish = choice.get("finish_reason")
        if finish is not None:
            self.finish_reason = finish
            if self.only_extract:
                return None
        choice["delta"] = delta
        has_payload = any(v not in (None, "", [], {}) for v in delta.values())
        if not has_payload and finish is None and "role" not in delta:
            if not (choice.get("logprobs")):
                return None
        return choice

    def message(self) -> dict[str, Any]:
        return self.accumulator.message()


def relay_event(data: str | None, raw: bytes, rnd: StreamRound) -> bytes | None:
    """The bytes to send the client for one upstream SSE event (None: nothing)."""
    if data is None:
        return raw  # comments and keep-alives pass through
    if data.strip() == "[DONE]":
        rnd.complete = True
        return None  # sent once, at the very end
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return raw  # not ours to judge
    if not isinstance(chunk, dict) or "error" in chunk:
        return raw
    out = rnd.feed(chunk)
    return encode_data(orjson.dumps(out)) if out is not None else None


def _chunk(chunk_id: str | None, last: dict[str, Any], **fields: Any) -> bytes:
    base = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": last.get("created"),
        "model": last.get("model"),
        "system_fingerprint": last.get("system_fingerprint"),
    }
    return encode_data(orjson.dumps({**base, **fields}))


def finish_chunk(chunk_id: str | None, last: dict[str, Any]) -> bytes:
    """A final chunk ending the reply normally (when the proxy's rounds ran out)."""
    choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    return _chunk(chunk_id, last, choices=[choice])


def usage_chunk(chunk_id: str | None, last: dict[str, Any], usage: dict[str, Any]) -> bytes:
    """OpenAI's usage-only last chunk (`choices: []`), for clients that asked for it."""
    return _chunk(chunk_id, last, choices=[], usage=usage)


def error_event(body: Any, detail: str | None = None) -> bytes:
    """An SSE error event: the upstream's own error object when it sent one."""
    if isinstance(body, bytes | memoryview):
        try:
            data = orjson.loads(bytes(body))
            if isinstance(data, dict) and "error" in data:
                return encode_data(orjson.dumps(data))
        except orjson.JSONDecodeError:
            pass
    message = "The upstream connection failed during the stream"
    if detail:
        message += f" ({detail})"
    error = {"message": message, "type": "server_error", "param": None}
    return encode_data(orjson.dumps({"error": {**error, "code": "upstream_stream_error"}}))


class ChatRelay:
    """A streamed chat completion spanning one or more upstream rounds."""

    def __init__(self, wants_usage: bool) -> None:
        self.wants_usage = wants_usage
        self.chunk_id: str | None = None
        self.last_chunk: JSON | None = None
        self.usages: list[JSON] = []
        self.rnd = StreamRound(first_round=True, keep_usage_field=wants_usage)

    def feed(self, event: str | None, data: str | None, raw: bytes) -> list[bytes]:
        out = relay_event(data, raw, self.rnd)
        return [out] if out else []

    @property
    def round_done(self) -> bool:
        """The upstream's round is whole (its usage or [DONE] came): the relay answers it
        without waiting for the rest of the body (an upstream may end it later)."""
        return self.rnd.complete

    def whole(self, raw: bytes) -> list[bytes]:
        """A whole completion sent as the answer to a stream request: one chunk."""
        return relay_completion(raw, self.rnd)

    def end_round(self) -> Round:
        rnd = self.rnd
        self.chunk_id = rnd.chunk_id
        if rnd.usage:
            self.usages.append(rnd.usage)
        self.last_chunk = rnd.accumulator.to_completion()
        message = rnd.message()
        self.rnd = StreamRound(
            chunk_id=self.chunk_id, first_round=False, keep_usage_field=self.wants_usage
        )
        return Round(message=message, usage=usage_of(rnd.usage), only_extract=rnd.only_extract)

    def finish(self, *, hidden_last: bool) -> list[bytes]:
        out = []
        if hidden_last and self.last_chunk is not None:
            # Out of extract rounds: end the reply the client saw normally.
            out.append(finish_chunk(self.chunk_id, self.last_chunk))
        total = usage_sum(self.usages, CHAT)
        if self.wants_usage and total is not None and self.last_chunk is not None:
            out.append(usage_chunk(self.chunk_id, self.last_chunk, total))
        out.append(DONE)
        return out

    def error(self, body: Any, detail: str | None = None) -> bytes:
        return error_event(body, detail)
