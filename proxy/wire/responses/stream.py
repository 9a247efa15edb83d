"""A Responses API stream spanning several upstream rounds, relayed as one response.

The proxy answers the model's `extract_compacted_tool_result` calls itself and asks upstream
again, yet the client must see one response. `ResponsesRelay` is told each upstream event of
each round and returns what to send: `response.created` / `in_progress` of the first round
only; nothing of an extract call, nor of reasoning that led only to extract calls (the rules
of `proxy.wire.responses.reply`); output indexes consecutive across rounds; sequence numbers
counted over everything sent; and each round's `response.completed` held back, so
`final_events` sends one for all rounds, whose output is what the client saw and whose usage
is the sum. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.wire.responses.reply import (
    RoundResult,
    client_view,
    hidden_indexes,
    round_result,
)
from proxy.wire.responses.tool import is_extract_item
from proxy.wire.responses.whole import whole_events
from proxy.wire.sse import encode_data
from proxy.wire.usage import RESPONSES, usage_sum

__all__ = ["ResponsesRelay", "encode_event", "error_event"]

FIRST_ROUND_ONLY = frozenset({"response.created", "response.in_progress", "response.queued"})
TERMINAL = frozenset({"response.failed", "response.incomplete"})


def encode_event(name: str | None, data: Mapping[str, Any]) -> bytes:
    """One SSE event as the Responses API writes them: `event:` then `data:`."""
    name = name or data.get("type")
    head = b"event: " + name.encode() + b"\n" if isinstance(name, str) and name else b""
    return head + encode_data(orjson.dumps(data))


def error_event(message: str, code: str | None, sequence_number: int = 0) -> bytes:
    """A Responses-shaped stream error, for a stream that breaks."""
    data = {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "sequence_number": sequence_number,
    }
    return encode_event("error", data)


def _is_reasoning(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"


_Event = tuple[str | None, dict[str, Any], bytes | None]


@dataclass
class _Round:
    """What the relay tracks within one upstream round (indexes are the upstream's)."""

    to_client: dict[int, int] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # visible indexes, in the client's order
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    hidden: set[int] = field(default_factory=set)
    hidden_ids: set[str] = field(default_factory=set)
    held: dict[int, list[_Event]] = field(default_factory=dict)  # reasoning not yet shown
    result: RoundResult | None = None


class ResponsesRelay:
    """Splices the event streams of one client response's upstream rounds into one.

    `feed` each parsed event of a round (its `event:` name, its data, its raw bytes) and send
    what it returns; `end_round` when the round's stream ends; `final_events` once no round
    follows. Reasoning is held back until a visible item follows it (then it is shown first)
    or its round completes (then it is shown unless the round made extract calls); if the
    stream breaks first it is never shown.
    """

    def __init__(
        self, *, hide_extract: bool = True, client_fields: Mapping[str, Any] | None = None
    ) -> None:
        self.hide_extract = hide_extract
        self.client_fields = dict(client_fields or {})
        self.sequence_number = 0  # of the next event sent
        self.rounds = 0  # rounds ended so far
        self.seen: list[Any] = []  # the items the client saw, across rounds
        self.finished = False  # a terminal event (failed, incomplete, error) was sent
        self._next_index = 0
        self._usages: list[Any] = []
        self._first: dict[str, Any] | None = None
        self._last: dict[str, Any] | None = None
        self._round = _Round()

    # -- sending ---------------------------------------------------------------------------

    def _emit(self, name: str | None, data: dict[str, Any], raw: bytes | None) -> bytes:
        """`raw` is the upstream's bytes for `data` unchanged, or None when data is new."""
        if "sequence_number" in data and data["sequence_number"] != self.sequence_number:
            data, raw = {**data, "sequence_number": self.sequence_number}, None
        self.sequence_number += 1
        return raw if raw is not None else encode_event(name, data)

    def _visible(
        self, index: int, name: str | None, data: dict[str, Any], raw: bytes | None
    ) -> bytes:
        rnd = self._round
        client = rnd.to_client.get(index)
        if client is None:
            client = rnd.to_client[index] = self._next_index
            self._next_index += 1
            rnd.order.append(index)
        if data.get("output_index") != client:
            data, raw = {**data, "output_index": client}, None
        return self._emit(name, data, raw)

    def _release(self) -> list[bytes]:
        """Held reasoning goes out: a visible item follows it, or its round completed."""
        held, self._round.held = self._round.held, {}
        return [self._visible(i, *event) for i, events in held.items() for event in events]

    # -- the events ------------------------------------------------------------------------

    def feed(self, event: str | None, data: Any, raw: bytes | None = None) -> list[bytes]:
        """The bytes to send the client now for one upstream event (often none).

        `data` is the event's data as parsed JSON, or its text (an `SSEEvent.data`)."""
        if isinstance(data, str):
            if data.strip() == "[DONE]":
                return []  # not a Responses event; the client's stream ends once, at the end
            try:
                data = orjson.loads(data)
            except orjson.JSONDecodeError:
                return [raw] if raw else []  # not ours to judge
        if not isinstance(data, dict):
            return [raw] if raw else []  # comments and keep-alives (data None) pass
        kind = data.get("type") or event
        if kind in FIRST_ROUND_ONLY:
            if self.rounds > 0:
                return []
            response = data.get("response")
            if isinstance(response, dict):
                self._first = self._first or response
                view = client_view(response, self.client_fields, self.hide_extract)
                if view is not response:
                    data, raw = {**data, "response": view}, None
            return [self._emit(event, data, raw)]
        if kind == "response.completed":
            return self._close(data.get("response"), "completed")
        if kind in TERMINAL:
            status = "failed" if kind == "response.failed" else "incomplete"
            out = self._close(data.get("response"), status)
            self.finished = True
            body = {**data, "response": self._client_response(data.get("response"))}
            return [*out, self._emit(event, body, None)]
        if kind == "error":
            self.finished = True
            return [self._emit(event, data, raw)]
        index = data.get("output_index")
        if not isinstance(index, int) or isinstance(index, bool):
            if data.get("item_id") in self._round.hidden_ids:
                return []
            return [self._emit(event, data, raw)]
        return self._indexed(index, kind, event, data, raw)

    def whole(self, raw: bytes) -> list[bytes]:
        """What to send for a whole Response object the upstream sent as the answer to a
        stream request: the events the API would have streamed, relayed like any round (a
        body that is not a response ends the stream with an `error` event)."""
        return [out for name, data in whole_events(raw) for out in self.feed(name, data)]

    def _indexed(
        self, index: int, kind: Any, name: str | None, data: dict[str, Any], raw: bytes | None
    ) -> list[bytes]:
        rnd = self._round
        item = data.get("item")
        if kind in ("response.output_item.added", "response.output_item.done"):
            if isinstance(item, dict):
                rnd.items[index] = item
        if kind == "response.output_item.added" and index not in rnd.to_client:
            if self.hide_extract and is_extract_item(item):
                rnd.hidden.add(index)
                if isinstance(item, dict) and isinstance(item.get("id"), str):
                    rnd.hidden_ids.add(item["id"])
                return []
            if _is_reasoning(item):
                rnd.held.setdefault(index, []).append((name, data, raw))
                return []
            return [*self._release(), self._visible(index, name, data, raw)]
        if index in rnd.hidden or data.get("item_id") in rnd.hidden_ids:
            return []
        if index in rnd.held:
            rnd.held[index].append((name, data, raw))
            return []
        return [self._visible(index, name, data, raw)]

    def _close(self, response: Any, status: str | None) -> list[bytes]:
        """The round is over: settle its held reasoning and note what it produced."""
        rnd = self._round
        if rnd.result is not None:
            return []
        if rnd.hidden:  # the round made extract calls: reasoning no item followed led to them
            rnd.hidden.update(rnd.held)
            rnd.held = {}
        out = self._release() if status is not None else []
        response = response if isinstance(response, dict) else None
        output = response.get("output") if response else None
        seen = max(rnd.items, default=-1) + 1
        if isinstance(output, list) and output and not rnd.items:
            # No item was streamed: the final response alone carries the round's output.
            rnd.hidden = hidden_indexes(output, self.hide_extract)
            rnd.order = [i for i in range(len(output)) if i not in rnd.hidden]
            self._next_index += len(rnd.order)
        elif not isinstance(output, list) or len(output) != seen:
            output = [rnd.items.get(i) for i in range(seen)]  # the stream's own items
        rnd.result = round_result(output, rnd.hidden, rnd.order, status, response)
        self.seen.extend(x for x in rnd.result.visible if x is not None)
        self._usages.append(rnd.result.usage)
        if response is not None:
            self._first = self._first or response
            self._last = response
        return out

    def end_round(self) -> RoundResult:
        """The round's stream ended: what it produced (`to_round` reads it as the pipeline's
        `Round`). The next `feed` starts a new round."""
        self._close(None, None)
        result = self._round.result
        assert result is not None
        self._round = _Round()
        self.rounds += 1
        return result

    # -- the end ---------------------------------------------------------------------------

    def _client_response(self, response: Any) -> dict[str, Any]:
        base = response if isinstance(response, dict) else self._last or self._first or {}
        merged = dict(base)
        for key in ("id", "created_at"):
            if self._first is not None and key in self._first:
                merged[key] = self._first[key]
        merged["output"] = [x for x in self.seen if x is not None]
        usage = usage_sum(self._usages, RESPONSES)
        if usage is not None:
            merged["usage"] = usage
        return client_view(merged, self.client_fields, self.hide_extract)

    def finish(self, *, hidden_last: bool = False) -> list[bytes]:
        """The closing events: the one `response.completed` (its output is only what the
        client saw, so a last round of hidden calls needs nothing more)."""
        return self.final_events()

    def final_events(self) -> list[bytes]:
        """The one `response.completed` for every round (nothing after a terminal event)."""
        if self.finished:
            return []
        self.finished = True
        response = self._client_response(None)
        response["status"] = "completed"
        data = {"type": "response.completed", "response": response, "sequence_number": 0}
        return [self._emit("response.completed", data, None)]

    def error(self, body: Any, detail: str | None = None) -> bytes:
        """An error event ending the stream: the upstream's own error when its body (a
        refused continuation round) has one, else the stream broke (`detail` says how)."""
        try:
            data = orjson.loads(bytes(body)) if isinstance(body, bytes | memoryview) else body
        except orjson.JSONDecodeError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            return self.error_event(error["message"], code if isinstance(code, str) else None)
        message = "The upstream connection failed during the stream"
        return self.error_event(f"{message} ({detail})" if detail else message)

    def error_event(self, message: str, code: str | None = "upstream_stream_error") -> bytes:
        """A stream error in sequence, ending the client's stream."""
        self.finished = True
        event = error_event(message, code, self.sequence_number)
        self.sequence_number += 1
        return event
