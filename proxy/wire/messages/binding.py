"""Thinking blocks bound to their prefix: what the proxy may send back to Anthropic.

Anthropic's models with "preserved thinking" bind each thinking and `redacted_thinking`
block to its prefix (the top-level `system`, `tools`, every message before the block and the
blocks before it in its message) and refuse, with a 400, a block that comes back under
another prefix ("Invalid `signature` in `thinking` block. The block is bound to a different
conversation."). A compaction changes the prefix of every block after its first change: a
level-1 placeholder in an old `tool_result`, a summary after the client's `system`, the
extract tool added to `tools`, a hidden extract round the client never sends back.

The proxy keeps, with the session, the prefix each block was written under: the running
hash (`PrefixChain`) of the upstream request that produced it, then the reply's blocks
before it (`reply_bindings`). Before a request goes upstream, `bind` walks it with the same
hash and removes every block whose prefix is not the one it was written under; the next
blocks are judged without it, so a block written before the change (its prefix held the
removed one) goes too, and one written after the compaction keeps its prefix as long as the
compaction stands. Nothing else changes: kept blocks go byte-exact, and a request whose
blocks all match is returned as it came. The removal is derived from the bindings kept with
the session, so later requests repeat it exactly (append-only between compactions); a
branch or an edit by the client is judged the same way.

A block the session has no binding for (written before the proxy kept them, or through
another path) is kept only when the request goes upstream as the client wrote it
(`trust_unknown`), since then its prefix is the client's own.

Removal, not `"drop_block"`: it costs nothing (no beta header, no field the account must
support), works on every model and account, and the upstream reads exactly the prefix the
proxy sends, so the prompt cache keeps that prefix from one request to the next. An
assistant message a removal leaves empty gets one short text block (Anthropic refuses an
empty message except the final one). Only models that run the check (`checks_prefixes`) are
treated: on older models a removed block would cost the tool loop its required leading
thinking and the cache its prefix, for nothing. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

THINKING_KINDS = ("thinking", "redacted_thinking")
# Anthropic's models with preserved thinking (its "prefix checks" page): Fable and Mythos from
# 5.1, Opus, Sonnet and Haiku from 5.5, and every family from 6 on, so a later model is
# covered without a release. The name may carry a platform's prefix (Bedrock, Vertex) or a date.
MODEL_VERSION = re.compile(r"claude-([a-z]+)-(\d{1,2})(?:[-.](\d{1,2})(?!\d))?")
FROM_MINOR = {"fable": 1, "mythos": 1}  # the others check from x.5
OMITTED = "(thinking omitted)"
MAX_BINDINGS = 4096  # bindings kept per session, the oldest forgotten first


def checks_prefixes(model: Any) -> bool:
    """Whether Anthropic checks thinking prefixes for this model."""
    found = MODEL_VERSION.search(model) if isinstance(model, str) else None
    if found is None:
        return False
    family, major, minor = found.group(1), int(found.group(2)), int(found.group(3) or 0)
    return major > 5 or (major == 5 and minor >= FROM_MINOR.get(family, 5))


def block_key(block: Mapping[str, Any]) -> str:
    """A short key for a thinking block: a hash of its signature (redacted: its data)."""
    value = block.get("signature") if block.get("type") == "thinking" else block.get("data")
    return hashlib.sha256(str(value or "").encode()).hexdigest()[:32]


def _stripped(block: Any) -> Any:
    """A block without `cache_control` (nor the blocks a `tool_result` holds): clients and
    the proxy move breakpoints every turn, and they are not part of the prefix."""
    if not isinstance(block, dict) or not (
        "cache_control" in block or isinstance(block.get("content"), list)
    ):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_stripped(b) for b in out["content"]]
    return out


def _bytes(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


class PrefixChain:
    """The running hash of a request's prefix: `system` and `tools`, then block by block."""

    def __init__(self, hasher: Any = None) -> None:
        self.hasher = hasher if hasher is not None else hashlib.sha256()

    @classmethod
    def head(cls, body: Mapping[str, Any]) -> PrefixChain:
        chain = cls()
        system = body.get("system")
        listed = [_stripped(b) for b in system] if isinstance(system, list) else system
        chain.hasher.update(b"system:" + _bytes(listed))
        chain.hasher.update(b"tools:" + _bytes([_stripped(t) for t in body.get("tools") or []]))
        return chain

    def message(self, role: Any) -> None:
        self.hasher.update(b"\nmessage:" + _bytes(role))

    def content(self, content: Any) -> None:
        """A message's content that is not a list of blocks (a string)."""
        self.hasher.update(b"\ncontent:" + _bytes(content))

    def block(self, block: Any) -> None:
        self.hasher.update(b"\nblock:" + _bytes(_stripped(block)))

    def digest(self) -> str:
        return str(self.hasher.hexdigest()[:32])

    def copy(self) -> PrefixChain:
        return PrefixChain(self.hasher.copy())


@dataclass
class Walked:
    """What `bind` went over of a request from which it removed nothing, for the session's
    next request to go on from: the same head (`system`, `tools`) and trust, its messages
    (the very objects: a history resent as it was is parsed into the same objects,
    `proxy.turn.body_reuse`), the hash after each of them, and per message the binding each
    thinking block was judged by. A later request whose first messages are those objects,
    and whose bindings still say the same of their blocks, is judged the same up to there:
    every block kept, the same hash. Never changed once made."""

    head: str
    trust: bool
    messages: list[Any]
    chains: list[Any]  # the hasher after each message
    judged: list[tuple[tuple[str, str | None], ...]]  # (block key, binding) of its blocks


@dataclass
class Bound:
    """A request made safe to send: its body, the blocks removed, and the hash of its whole
    prefix (for the bindings of the reply's blocks); `walked`, when nothing was removed."""

    body: dict[str, Any]
    removed: int
    tail: PrefixChain
    walked: Walked | None = None


def _resumable(
    walked: Walked | None, head: str, trust: bool, messages: list[Any], bindings: Mapping[str, Any]
) -> int:
    """How many of `messages` were judged already, and alike, in `walked`."""
    if walked is None or walked.head != head or walked.trust != trust:
        return 0
    same = 0
    for now, then in zip(messages, walked.messages, strict=False):
        if now is not then:
            break
        same += 1
    for n in range(same):
        if any(bindings.get(key) != seen for key, seen in walked.judged[n]):
            return n
    return same


def bind(
    body: dict[str, Any],
    bindings: Mapping[str, str],
    *,
    trust_unknown: bool,
    walked: Walked | None = None,
) -> Bound:
    """`body` without the thinking blocks whose prefix is not the one they were written
    under (`bindings`: block key -> prefix digest); see the module docstring. With `walked`
    (the session's last request's), the messages it judged alike are not hashed again."""
    chain = PrefixChain.head(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return Bound(body, 0, chain)
    head = chain.digest()
    start = _resumable(walked, head, trust_unknown, messages, bindings)
    chains: list[Any] = []
    judged: list[tuple[tuple[str, str | None], ...]] = []
    if start and walked is not None:
        chain = PrefixChain(walked.chains[start - 1].copy())
        chains, judged = walked.chains[:start], walked.judged[:start]
    sent: list[Any] = messages[:start]
    removed = 0
    for n in range(start, len(messages)):
        seen: list[tuple[str, str | None]] = []
        message, dropped = _bound_message(
            messages[n], n == len(messages) - 1, bindings, trust_unknown, removed, chain, seen
        )
        sent.append(message)
        removed += dropped
        chains.append(chain.hasher.copy())
        judged.append(tuple(seen))
    if not removed:
        done = Walked(head, trust_unknown, list(messages), chains, judged)
        return Bound(body, 0, chain, done)
    return Bound({**body, "messages": sent}, removed, chain)


def _bound_message(
    message: Any,
    last: bool,
    bindings: Mapping[str, str],
    trust_unknown: bool,
    removed_before: int,
    chain: PrefixChain,
    seen: list[tuple[str, str | None]],
) -> tuple[Any, int]:
    """(`message` as it may go, the blocks removed from it), its blocks added to `chain`;
    each thinking block's key and binding go to `seen`."""
    if not isinstance(message, dict):
        return message, 0
    chain.message(message.get("role"))
    content = message.get("content")
    if not isinstance(content, list):
        chain.content(content)
        return message, 0
    kept: list[Any] = []
    removed = 0
    for block in content:
        if isinstance(block, dict) and block.get("type") in THINKING_KINDS:
            key = block_key(block)
            signed = bindings.get(key)
            seen.append((key, signed))
            if signed is None:
                valid = trust_unknown and not (removed_before + removed)
            else:
                valid = signed == chain.digest()
            if not valid:
                removed += 1
                continue
        kept.append(block)
        chain.block(block)
    if not removed:
        return message, 0
    if not kept and not last:
        kept = [{"type": "text", "text": OMITTED}]
        chain.block(kept[0])
    return {**message, "content": kept}, removed


def reply_bindings(tail: PrefixChain, content: Any) -> dict[str, str]:
    """The bindings of a reply's thinking blocks: the request's prefix (`tail`), then the
    reply as the next assistant message, each block after those before it."""
    if not isinstance(content, list):
        return {}
    chain = tail.copy()
    chain.message("assistant")
    found: dict[str, str] = {}
    for block in content:
        if isinstance(block, dict) and block.get("type") in THINKING_KINDS:
            found[block_key(block)] = chain.digest()
        chain.block(block)
    return found


def remember(bindings: dict[str, str], new: Mapping[str, str]) -> None:
    """Add `new` to a session's bindings, the oldest forgotten past `MAX_BINDINGS`."""
    bindings.update(new)
    excess = len(bindings) - MAX_BINDINGS
    for key in list(bindings)[: max(0, excess)]:
        del bindings[key]
