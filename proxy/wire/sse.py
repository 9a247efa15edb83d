"""Server-sent events on the wire, and OpenAI chat-completion chunks folded into one message.

`SSEDecoder` turns bytes into `SSEEvent`s incrementally (each keeps its raw bytes so a proxy
can forward the stream unchanged); `encode_data`/`DONE` write events; `ChunkAccumulator`
rebuilds the assistant message, finish reason and usage from `chat.completion.chunk` objects.
Pure: no I/O, no HTTP library.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

DONE = b"data: [DONE]\n\n"

_LINE_END = re.compile(rb"\r\n?|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SSEEvent:
    """One event: its fields as parsed, and `raw`, the exact bytes it was read from.

    `data` is None when the event had no `data:` line (a comment, or only `id:`/`retry:`);
    `comment` holds the text of `:` lines (one leading space removed), joined by newlines.
    `raw` also holds any stray blank lines that preceded the event (and the `\n` of a `\r\n`
    split across chunks after the `\r` ended an event), so the concatenation of every
    event's `raw` reproduces the stream byte for byte.
    """

    data: str | None = None
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    comment: str | None = None
    raw: bytes = b""

    @property
    def is_done(self) -> bool:
        """True for OpenAI's end-of-stream sentinel, `data: [DONE]`."""
        return self.data is not None and self.data.strip() == "[DONE]"


class SSEDecoder:
    """Incremental decoder following the WHATWG event-stream rules.

    Lines end in `\\n`, `\\r\\n` or `\\r`; a chunk may split anywhere (inside a UTF-8
    character, between `\\r` and `\\n`) because lines are cut on bytes and decoded whole.
    Unlike a browser, it also yields comment-only and data-less events, so nothing is lost.
    """

    def __init__(self) -> None:
        self._buf = bytearray()  # bytes of the unfinished line, already scanned
        self._raw = bytearray()  # bytes of the event being read
        self._after_cr = False  # the last line ended in a bare \r: a following \n is its end
        self._started = False
        self._reset_fields()
        self.last_event_id: str | None = None

    def _reset_fields(self) -> None:
        self._data: list[str] = []
        self._comments: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self._has_lines = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if not data:
            return events
        if not (self._buf or self._raw or self._after_cr or self._has_lines):
            whole = _whole_data_events(data)
            if whole is not None:
                self._started = True
                return whole
        if self._after_cr:
            self._after_cr = False
            if data[:1] == b"\n":
                self._raw += b"\n"
                data = data[1:]
        scan = len(self._buf)
        buf = self._buf
        buf += data
        pos = 0
        while True:
            match = _LINE_END.search(buf, scan)
            if match is None:
                break
            line = bytes(buf[pos : match.start()])
            self._raw += buf[pos : match.end()]
            pos = scan = match.end()
            if match.group() == b"\r" and pos == len(buf):
                self._after_cr = True
            event = self._line(line)
            if event is not None:
                events.append(event)
        del buf[:pos]
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: an unterminated last event is dispatched leniently.

        Trailing bytes that form no event (stray blank lines) come back as an event with no
        fields, so joining the `raw` of every event reproduces the input exactly.
        """
        events: list[SSEEvent] = []
        if self._buf:
            self._raw += self._buf
            line = bytes(self._buf)
            self._buf.clear()
            event = self._line(line)
            if event is not None:
                events.append(event)
        event = self._dispatch()
        if event is not None:
            events.append(event)
        if self._raw:
            events.append(SSEEvent(raw=bytes(self._raw)))
            self._raw.clear()
        self._after_cr = False
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not self._started:
            self._started = True
            if line.startswith(_BOM):
                line = line[len(_BOM) :]
        if not line:
            return self._dispatch()
        self._has_lines = True
        text = line.decode("utf-8", "replace")
        name, colon, value = text.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if not name and colon:
            self._comments.append(value)
        elif name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._has_lines:
            return None  # a stray blank line: its bytes stay in `_raw` for the next event
        event = SSEEvent(
            data="\n".join(self._data) if self._data else None,
            event=self._event,
            id=self._id,
            retry=self._retry,
            comment="\n".join(self._comments) if self._comments else None,
            raw=bytes(self._raw),
        )
        self._raw.clear()
        self._reset_fields()
        return event


def _whole_data_events(data: bytes) -> list[SSEEvent] | None:
    """The events of `data` when it is nothing but whole one-line `data: ` events, each
    ended by a blank line (`\n` only), as upstreams send them one or a few to a chunk: the
    events the line-by-line decoding would give, without it. None for anything else."""
    if not (data.startswith(b"data: ") and data.endswith(b"\n\n")) or b"\r" in data:
        return None
    parts = data.split(b"\n\n")
    if parts[-1]:
        return None
    events = []
    for part in parts[:-1]:
        if not part.startswith(b"data: ") or b"\n" in part:
            return None
        events.append(SSEEvent(data=part[6:].decode("utf-8", "replace"), raw=part + b"\n\n"))
    return events


def encode_data(payload: bytes | str) -> bytes:
    """One `data:` event; a payload with line breaks becomes several `data:` lines."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    lines = _LINE_END.split(payload)
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def encode_comment(text: str = "") -> bytes:
    """A comment event (`: text`), e.g. a keep-alive that clients ignore."""
    lines = _LINE_END.split(text.encode("utf-8"))
    return b"".join(b": " + line + b"\n" for line in lines) + b"\n"


@dataclass
class _ToolCall:
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Choice:
    role: str | None = None
    text: dict[str, list[str]] = field(default_factory=dict)  # content, refusal, reasoning...
    calls: list[_ToolCall] = field(default_factory=list)
    by_index: dict[int, _ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    logprobs: dict[str, list[Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_TEXT_FIELDS = ("content", "refusal", "reasoning", "reasoning_content")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ChunkAccumulator:
    """Fold `chat.completion.chunk` objects into the message the stream describes.

    Tool-call deltas are matched the way lenient clients do, since servers differ: by
    `index`; a delta whose `id` names a known call goes to that call; a new `id` at an index
    whose call already has another id starts a new call (servers that number every parallel
    call 0); a delta without `index` goes to the call with its id, else a new call if it has
    an id, else the last call.
    """

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.service_tier: str | None = None
        self.usage: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}

    def add(self, chunk: dict[str, Any]) -> None:
        """Fold one chunk in; malformed parts (wrong types) are skipped, never raised on."""
        if not isinstance(chunk, dict):
            return
        if self.id is None and chunk.get("id"):
            self.id = chunk["id"]
        if self.created is None and chunk.get("created") is not None:
            self.created = chunk["created"]
        for key in ("model", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None:
                setattr(self, key, chunk[key])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for raw_choice in _list(chunk.get("choices")):
            if isinstance(raw_choice, dict):
                index = _index(raw_choice.get("index")) or 0
                self._add_choice(self._choices.setdefault(index, _Choice()), raw_choice)

    def _add_choice(self, choice: _Choice, raw: dict[str, Any]) -> None:
        if raw.get("finish_reason") is not None:
            choice.finish_reason = raw["finish_reason"]
        logprobs = raw.get("logprobs")
        if isinstance(logprobs, dict):
            target = choice.logprobs = choice.logprobs or {}
            for key, items in logprobs.items():
                target.setdefault(key, []).extend(_list(items))
        delta = raw.get("delta")
        for key, value in delta.items() if isinstance(delta, dict) else ():
            if value is None:
                continue
            if key == "role":
                choice.role = str(value)
            elif key in _TEXT_FIELDS:
                if isinstance(value, str):
                    choice.text.setdefault(key, []).append(value)
            elif key == "tool_calls":
                for raw_call in _list(value):
                    if isinstance(raw_call, dict):
                        self._add_call(choice, raw_call)
            elif isinstance(value, str) and isinstance(choice.extra.get(key, ""), str):
                choice.extra[key] = choice.extra.get(key, "") + value
            elif isinstance(value, list) and isinstance(choice.extra.get(key, []), list):
                choice.extra[key] = [*choice.extra.get(key, []), *value]
            else:
                choice.extra[key] = value

    @staticmethod
    def _add_call(choice: _Choice, raw: dict[str, Any]) -> None:
        index = _index(raw.get("index"))
        call_id = str(raw["id"]) if raw.get("id") else None
        by_id = [c for c in choice.calls if call_id is not None and c.id == call_id]
        current = choice.by_index.get(index) if index is not None else None
        if by_id:
            call = by_id[-1]
        elif current is not None and not (call_id and current.id and current.id != call_id):
            call = current
        elif index is None and call_id is None and choice.calls:
            call = choice.calls[-1]
        else:
            call = _ToolCall()
            choice.calls.append(call)
        if index is not None:
            choice.by_index[index] = call
        if call_id is not None:
            call.id = call_id
        if isinstance(raw.get("type"), str):
            call.type = raw["type"]
        function = raw.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        # Some servers repeat the whole name on every delta; rarely one splits it.
        if isinstance(name, str) and name and name != call.name:
            call.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, dict | list):  # a few servers send the arguments as JSON
            arguments = json.dumps(arguments, separators=(",", ":"))
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)

    @property
    def choice_indexes(self) -> list[int]:
        return sorted(self._choices)

    @property
    def finish_reason(self) -> str | None:
        """Finish reason of choice 0 (see `choice_finish_reason` for others)."""
        return self.choice_finish_reason(0)

    def choice_finish_reason(self, choice: int = 0) -> str | None:
        found = self._choices.get(choice)
        return found.finish_reason if found else None

    def tool_calls(self, choice: int = 0) -> list[dict[str, Any]]:
        found = self._choices.get(choice)
        return [
            {
                "id": call.id or "",
                "type": call.type or "function",
                "function": {"name": call.name, "arguments": "".join(call.arguments)},
            }
            for call in (found.calls if found else ())
        ]

    def message(self, choice: int = 0) -> dict[str, Any]:
        """The assistant message param: role, content, tool_calls, refusal and reasoning."""
        found = self._choices.get(choice) or _Choice()
        tool_calls = self.tool_calls(choice)
        content_parts = found.text.get("content")
        content: str | None = "".join(content_parts) if content_parts is not None else None
        if content == "" and tool_calls:
            content = None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        for key in ("refusal", "reasoning", "reasoning_content"):
            if key in found.text:
                message[key] = "".join(found.text[key])
        if tool_calls:
            message["tool_calls"] = tool_calls
        return message

    def to_completion(self) -> dict[str, Any]:
        """A non-streaming `chat.completion` object equivalent to the stream."""
        choices = []
        for index in self.choice_indexes or [0]:
            found = self._choices.get(index) or _Choice()
            message = self.message(index)
            message.setdefault("refusal", None)
            for key, value in found.extra.items():
                message.setdefault(key, value)
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": found.logprobs,
                    "finish_reason": found.finish_reason,
                }
            )
        completion: dict[str, Any] = {
            "id": self.id or "",
            "object": "chat.completion",
            "created": self.created or 0,
            "model": self.model or "",
            "choices": choices,
            "usage": self.usage,
            "system_fingerprint": self.system_fingerprint,
        }
        if self.service_tier is not None:
            completion["service_tier"] = self.service_tier
        return completion
