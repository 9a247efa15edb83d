"""Canonical form of chat messages and the prefix hash chain used to recognise a session.

Clients echo assistant messages back with extra null fields and may send a content string
where they first sent text parts; neither may break the match, so the canonical form keeps
only what the model sees (role, text, tool calls, tool_call_id, name) with nulls and empties
dropped and key order ignored.

Canonicalising costs a few microseconds a message, so a long history is not canonicalised
on every turn: the chain is a running hash (each prefix's hash extends the previous one), and
a session remembers, beside the canonical hash of the prefix it has seen, a hash of those
messages exactly as they were received (`raw_digests`). A client that resends its earlier
messages unchanged (the usual case) has only its new messages canonicalised; anything else
falls back to canonicalising the whole history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
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


def raw_digests(
    messages: Sequence[Any],
    n: int,
    whole: bytes | None = None,
    *,
    resume: tuple[int, int, Any] | None = None,
    keep: Callable[[Any], None] | None = None,
) -> tuple[str | None, str]:
    """Hashes of `messages[:n]` and of all messages, as received (key order included).

    Each is the SHA-256 of the list as orjson writes it; the first is None when there are
    fewer than n messages. A list is written as `[`, its items joined by `,`, then `]`, so
    the two slices are written once each and hashed in one pass: the whole list's hash
    continues the prefix's from before its `]`. `whole`, when given, is how orjson wrote the
    whole list already (`proxy.session.json_limits.Written`): then only the tail is written, and the
    prefix is the whole's first bytes up to where the tail's items begin.

    With `whole`, a session's last request can spare this one the hashing of the bytes they
    share: `keep` is given the hash of every item of `whole` (all but its `]`), and `resume`
    (count, length, that hash) says the first `length` bytes of `whole` are the first `count`
    items that hash read; when `count` is n only the bytes after them are hashed.
    """
    if not 0 <= n <= len(messages):
        return None, raw_digests(messages, len(messages), whole, keep=keep)[1]
    if resume is not None and whole is not None and _resumes(resume, n, whole):
        state = resume[2]
        at_n = state.copy()
        at_n.update(b"]")
        h = state.copy()
        h.update(memoryview(whole)[resume[1] : -1])
        return at_n.hexdigest(), _closed(h, keep)
    try:
        tail = whole if whole is not None and n == 0 else orjson.dumps(messages[n:])
        head = _head_of(whole, tail, n, len(messages)) if whole is not None else None
        if head is None:
            head = orjson.dumps(messages[:n])
    except orjson.JSONEncodeError:  # a message at orjson's depth limit, too deep in a list
        return _list_digest(messages[:n]), _list_digest(messages)
    keep = keep if whole is not None else None
    h = hashlib.sha256(memoryview(head)[:-1])
    at_n = h.copy()
    at_n.update(b"]")
    if n == len(messages):
        _closed(h, keep)
        return at_n.hexdigest(), at_n.hexdigest()
    if n:
        h.update(b",")
    h.update(memoryview(tail)[1:-1])
    return at_n.hexdigest(), _closed(h, keep)


def _resumes(resume: tuple[int, int, Any], n: int, whole: bytes) -> bool:
    """Whether `resume` read exactly the first n items of `whole`, as far as can be seen."""
    count, length = resume[0], resume[1]
    return count == n > 0 and 1 < length < len(whole) and whole[length] in b",]"


def _closed(h: Any, keep: Callable[[Any], None] | None) -> str:
    """The hex digest of the list `h` has read all the items of, once its `]` is added."""
    if keep is not None:
        keep(h.copy())
    h.update(b"]")
    return str(h.hexdigest())


def _head_of(whole: bytes, tail: bytes, n: int, count: int) -> bytes | memoryview | None:
    """The first n items' list as orjson writes it, up to its last byte (which the hash
    leaves out), cut from the whole list's bytes; None when `whole` does not end in `tail`'s
    items (not the list it should be)."""
    if n == count:
        return whole
    if not n:
        return b"[]"
    # whole = `[` head items `,` tail items `]`: the head list is as long as the whole, less
    # the tail, plus a byte (both lists lose a bracket, a comma joins them).
    end = len(whole) - len(tail) + 1
    if end < 2 or whole[end - 1 : end] != b"," or not whole.endswith(tail[1:]):
        return None
    return memoryview(whole)[:end]


def _list_digest(messages: Sequence[Any]) -> str:
    """The hash `raw_digests` gives a list, its messages written one at a time."""
    h = hashlib.sha256(b"[")
    for i, message in enumerate(messages):
        if i:
            h.update(b",")
        h.update(orjson.dumps(message))
    h.update(b"]")
    return h.hexdigest()


_SEED = hashlib.blake2b(b"xun-proxy prefix chain 2", digest_size=16).digest()


class PrefixChain:
    """Hash of every prefix of a message list: `prefix(n)` identifies messages[:n].

    `prefix(n + 1)` is the hash of `prefix(n)` and message n's canonical digest. `trusted`
    (n, hash) is a prefix hash known to hold for these messages (their first n are byte for
    byte those a stored state hashed): prefixes from n on then need only the messages after
    it. Digests are computed when first needed.
    """

    def __init__(self, messages: Sequence[Any], *, trusted: tuple[int, str] | None = None) -> None:
        self._messages = messages
        self._digests: list[bytes | None] = [None] * len(messages)
        self._base = 0
        self._chain = [_SEED]  # _chain[k] is the hash of messages[: _base + k]
        if trusted is not None and 0 < trusted[0] <= len(messages):
            self._base, self._chain = trusted[0], [bytes.fromhex(trusted[1])]

    def __len__(self) -> int:
        return len(self._digests)

    def digest(self, i: int) -> bytes:
        d = self._digests[i]
        if d is None:
            d = self._digests[i] = message_digest(self._messages[i])
        return d

    def prefix(self, n: int) -> str:
        """Hex hash of the first n messages; n must be within 0..len."""
        if n < 0 or n > len(self._digests):
            raise IndexError(n)
        if n < self._base:  # before the trusted prefix: hash from the start
            self._base, self._chain = 0, [_SEED]
        chain = self._chain
        while self._base + len(chain) <= n:
            i = self._base + len(chain) - 1
            chain.append(hashlib.blake2b(chain[-1] + self.digest(i), digest_size=16).digest())
        return chain[n - self._base].hex()

    def legacy_prefix(self, n: int) -> str:
        """The hash states saved before the running chain used (one hash over n digests)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(n.to_bytes(8, "little"))
        for i in range(n):
            h.update(self.digest(i))
        return h.hexdigest()

    def matches(self, n: int, expected: str | None) -> bool:
        return expected is not None and 0 <= n <= len(self._digests) and self.prefix(n) == expected

    def common_prefix(self, other_digests: Sequence[bytes]) -> int:
        """How many leading messages are equal to those of another chain's digests."""
        n = 0
        for i, other in enumerate(other_digests[: len(self._digests)]):
            if self.digest(i) != other:
                break
            n += 1
        return n

    @property
    def digests(self) -> list[bytes]:
        return [self.digest(i) for i in range(len(self._digests))]
