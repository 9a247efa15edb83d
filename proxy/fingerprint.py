"""Canonical form of chat messages and the prefix hash chain used to recognise a session.

Clients echo assistant messages back with extra null fields and may send a content string
where they first sent text parts; neither may break the match, so the canonical form keeps
only what the model sees (role, text, tool calls, tool_call_id, name) with nulls and empties
dropped and key order ignored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

_KEPT_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _canonical_content(content: Any) -> Any:
    if isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            return "".join(str(p.get("text") or "") for p in content)
        return [_drop_empty(p) if isinstance(p, dict) else p for p in content]
    return content


def _canonical_tool_calls(calls: Any) -> Any:
    if not isinstance(calls, list):
        return calls
    out = []
    for call in calls:
        if not isinstance(call, dict):
            out.append(call)
            continue
        fn = call.get("function")
        if not isinstance(fn, dict):
            fn = {}
        out.append(
            _drop_empty(
                {"id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")}
            )
        )
    return out


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != "" and v != [] and v != {}}


def canonical(message: Any) -> bytes:
    """The canonical bytes of one message (any JSON value is accepted; non-dicts hash as-is)."""
    if not isinstance(message, dict):
        return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    form: dict[str, Any] = {}
    for field in _KEPT_FIELDS:
        value = message.get(field)
        if field == "content":
            value = _canonical_content(value)
        elif field == "tool_calls":
            value = _canonical_tool_calls(value)
        form[field] = value
    return orjson.dumps(_drop_empty(form), option=orjson.OPT_SORT_KEYS)


def message_digest(message: Any) -> bytes:
    return hashlib.blake2b(canonical(message), digest_size=16).digest()


class PrefixChain:
    """Hash of every prefix of a message list: `prefix(n)` identifies messages[:n]."""

    def __init__(self, messages: Sequence[Any]) -> None:
        self._digests = [message_digest(m) for m in messages]
        self._cache: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._digests)

    def prefix(self, n: int) -> str:
        """Hex hash of the first n messages; n must be within 0..len."""
        if n < 0 or n > len(self._digests):
            raise IndexError(n)
        cached = self._cache.get(n)
        if cached is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(n.to_bytes(8, "little"))
            for d in self._digests[:n]:
                h.update(d)
            cached = self._cache[n] = h.hexdigest()
        return cached

    def matches(self, n: int, expected: str | None) -> bool:
        return expected is not None and 0 <= n <= len(self._digests) and self.prefix(n) == expected

    def common_prefix(self, other_digests: Sequence[bytes]) -> int:
        """How many leading messages are equal to those of another chain's digests."""
        n = 0
        for a, b in zip(self._digests, other_digests, strict=False):
            if a != b:
                break
            n += 1
        return n

    @property
    def digests(self) -> list[bytes]:
        return list(self._digests)
