"""Anthropic's prefix checks on thinking blocks, as the fake Messages API runs them.

Models with "preserved thinking" bind each thinking (and `redacted_thinking`) block to its
prefix: the top-level `system`, `tools`, every message before the block and the blocks before
it in its own message. A block that comes back under another prefix, or after a block that
did, is invalid: the request is refused with a 400, or, when it asks for
`thinking.block_binding.prefix_mismatch_behavior: "drop_block"` (beta header
`thinking-binding-controls-2026-08-01`), the invalid blocks are dropped before the model
reads the request and listed in the reply's `input_transformations`.

The prefix is compared as Anthropic compares it: the parsed JSON, `cache_control` markers
left out (clients move them every turn), a string `content` or `system` the same as one text
block. `PrefixChain` is that comparison: a running hash, one step per block.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

BINDING_BETA = "thinking-binding-controls-2026-08-01"
# Models whose API refuses a thinking block bound to another prefix (Anthropic's "prefix
# checks" page); others record the binding but do not check it.
PREFIX_CHECK_MODELS = (
    "claude-fable-5-1",
    "claude-fable-5-2",
    "claude-opus-5-5",
    "claude-sonnet-5-5",
)
THINKING_KINDS = ("thinking", "redacted_thinking")


def mismatch_message(path: str, kind: str) -> str:
    """The 400's message for the first block bound to another prefix."""
    field_name = "signature" if kind == "thinking" else "data"
    return (
        f"{path}: Invalid `{field_name}` in `{kind}` block. The block is bound to a different "
        "conversation. Remove the block, or set "
        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )


def binding_key(block: Mapping[str, Any]) -> str:
    """What identifies a thinking block: its signature, or a redacted block's data."""
    value = block.get("signature") if block.get("type") == "thinking" else block.get("data")
    return str(value or "")


def _stripped(block: Any) -> Any:
    """A block without its `cache_control` (and those of the blocks a tool_result holds)."""
    if not isinstance(block, dict):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_stripped(b) for b in out["content"]]
    return out


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class PrefixChain:
    """A running hash of a request's prefix: system and tools first, then block by block."""

    hasher: Any = field(default_factory=hashlib.sha256)

    @classmethod
    def head(cls, body: Mapping[str, Any]) -> PrefixChain:
        chain = cls()
        system = [_stripped(b) for b in _blocks(body.get("system"))]
        chain.hasher.update(b"system:" + _bytes(system))
        chain.hasher.update(b"tools:" + _bytes([_stripped(t) for t in body.get("tools") or []]))
        return chain

    def message(self, role: Any) -> None:
        self.hasher.update(b"\nmessage:" + _bytes(role))

    def block(self, block: Any) -> None:
        self.hasher.update(b"\nblock:" + _bytes(_stripped(block)))

    def digest(self) -> str:
        return str(self.hasher.hexdigest())

    def copy(self) -> PrefixChain:
        return PrefixChain(self.hasher.copy())


def reply_digests(body: Mapping[str, Any], content: list[dict[str, Any]]) -> Iterator[str]:
    """The prefix digest of each block of a reply to `body` (its next assistant message)."""
    chain = PrefixChain.head(body)
    for message in body.get("messages") or []:
        chain.message(message.get("role"))
        for block in _blocks(message.get("content")):
            chain.block(block)
    chain.message("assistant")
    for block in content:
        yield chain.digest()
        chain.block(block)


@dataclass
class Checked:
    """What the check made of a request: the messages the model reads, the blocks dropped
    (`input_transformations` entries), or the refusal's message."""

    messages: list[Any]
    dropped: list[dict[str, str]] = field(default_factory=list)
    refusal: str | None = None


def check_prefixes(body: Mapping[str, Any], bound: Mapping[str, str], *, drop: bool) -> Checked:
    """Each thinking block of `body` against the prefix it was signed over (`bound`: its
    key -> digest). A block is valid when the prefix it comes back under hashes as the one it
    was signed over; without `drop` the first invalid one refuses the request. With `drop`
    invalid blocks are left out and the next are judged without them: a block signed before
    the change is bound to a prefix that held the dropped one, so every later block signed
    under the old prefix fails too, while thinking written after the drop stays valid."""
    chain = PrefixChain.head(body)
    messages: list[Any] = []
    dropped: list[dict[str, str]] = []
    for i, message in enumerate(body.get("messages") or []):
        if not isinstance(message, dict):
            messages.append(message)
            continue
        chain.message(message.get("role"))
        kept: list[Any] = []
        for j, block in enumerate(_blocks(message.get("content"))):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in THINKING_KINDS:
                signed = bound.get(binding_key(block))
                if signed is None or signed != chain.digest():
                    path = f"messages.{i}.content.{j}"
                    if not drop:
                        return Checked(messages, refusal=mismatch_message(path, str(kind)))
                    dropped.append(
                        {"type": "thinking_dropped", "path": path, "reason": "prefix_mismatch"}
                    )
                    continue
            kept.append(block)
            chain.block(block)
        content = message.get("content")
        messages.append({**message, "content": kept if isinstance(content, list) else content})
    return Checked(messages, dropped)
