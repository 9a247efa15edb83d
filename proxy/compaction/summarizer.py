"""The level-2 summariser: one upstream chat request per summary, split when it is too long.

The summary request must itself fit the model's window. When upstream refuses it for length,
the span is summarised in pieces, each piece carrying the summary of the ones before it, so
the last piece's summary covers them all; a single message too long on its own is shortened
(head and tail kept). A session's next summary is anchored: the request asks for the earlier
summary rewritten with the newly dropped messages merged in (`ANCHOR_NOTE`). The HTTP call is
injected (`post`), so this module does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from proxy.compact import COMPACTED_SYSTEM_PROMPT, SUMMARY_PROMPT
from proxy.errors import ContextLengthExceeded
from proxy.session.extract_tool import content_text

SHARED_NOTE = (
    "This is a request from the proxy that manages this conversation's context, not from the "
    "user: reply with the summary only, in text, without calling any tool."
)
SUMMARY_REQUEST = (
    "Write the summary of the conversation above now, in the markdown sections described in "
    "the system message. Output only the summary."
)

# Anchored summaries: a session's next summary is the previous one with the newly dropped
# span merged in, not a summary of a summary of a summary, which loses a little more each time.
ANCHOR_NOTE = (
    "The conversation above opens with the summary of everything before it (a system message). "
    "Write that summary again with the messages after it merged in: keep every fact, path, "
    "identifier, decision, preference and pending task it holds that is still true, add what "
    "the later messages add, update what they change, and drop only what they make obsolete."
)
_SUMMARY_HEAD = COMPACTED_SYSTEM_PROMPT.split("{summary}", 1)[0]
_CARRIED_HEAD = "Summary of the earlier part:"


def holds_summary(message: dict[str, Any]) -> bool:
    """Whether a message is an earlier summary (the proxy's fenced one, or a carried piece)."""
    text = content_text(message.get("content")) if message.get("role") == "system" else ""
    return text.startswith((_SUMMARY_HEAD, _CARRIED_HEAD))


PostFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _split_point(span: list[dict[str, Any]]) -> int | None:
    """An index near the middle where a piece may start (never at a tool result)."""
    mid = len(span) // 2
    candidates = sorted(range(1, len(span)), key=lambda i: abs(i - mid))
    for i in candidates:
        if span[i].get("role") != "tool":
            return i
    return None


def _shrink(message: dict[str, Any], keep: int) -> dict[str, Any]:
    text = content_text(message.get("content"))
    if len(text) <= keep:
        return message
    half = keep // 2
    omitted = len(text) - 2 * half
    short = f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"
    return {**message, "content": short}


@dataclass
class Summarizer:
    """Callable handed to the compaction engine: messages in, summary text (or None) out."""

    post: PostFn
    model: str
    tools: list[dict[str, Any]] | None = None
    max_depth: int = 8
    # The request as last sent upstream. When set, the summary request repeats it and adds
    # the instruction at the end, so the provider serves it from its prompt cache.
    prefix: list[dict[str, Any]] | None = None
    calls: int = 0

    @property
    def shares_prefix(self) -> bool:
        return self.prefix is not None

    async def __call__(self, messages: list[dict[str, Any]]) -> str | None:
        if self.prefix is not None:
            try:
                summary = await self._shared(self.prefix)
            except ContextLengthExceeded:
                summary = None
            if summary:
                return summary
        earlier: list[dict[str, Any]] = []
        span = list(messages)
        if span and span[0].get("role") == "system":
            earlier, span = [span[0]], span[1:]
        if not span:
            return None
        return await self._summarize(earlier, span, self.max_depth)

    async def _summarize(
        self, earlier: list[dict[str, Any]], span: list[dict[str, Any]], depth: int
    ) -> str | None:
        try:
            return await self._call(earlier, span)
        except ContextLengthExceeded:
            if depth <= 0:
                return None
        cut = _split_point(span) if len(span) > 1 else None
        if cut is None:
            longest = max(len(content_text(m.get("content"))) for m in span)
            if longest < 200:
                return None
            return await self._summarize(
                earlier, [_shrink(m, longest // 2) for m in span], depth - 1
            )
        first = await self._summarize(earlier, span[:cut], depth - 1)
        if first is None:
            return None
        carried = [{"role": "system", "content": f"{_CARRIED_HEAD}\n\n{first}"}]
        return await self._summarize(carried, span[cut:], depth - 1)

    async def _shared(self, prefix: list[dict[str, Any]]) -> str | None:
        """One request: the cached conversation as sent, then the instruction as a user turn."""
        anchored = any(holds_summary(m) for m in prefix[:2])
        note = f"{ANCHOR_NOTE}\n\n{SHARED_NOTE}" if anchored else SHARED_NOTE
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [*prefix, {"role": "user", "content": f"{SUMMARY_PROMPT}\n\n{note}"}],
            "stream": False,
        }
        if self.tools:
            body["tools"] = self.tools  # the same tools as the turns: the cached prefix
        return await self._send(body)

    async def _call(self, earlier: list[dict[str, Any]], span: list[dict[str, Any]]) -> str | None:
        anchored = any(holds_summary(m) for m in earlier)
        request = f"{SUMMARY_REQUEST}\n\n{ANCHOR_NOTE}" if anchored else SUMMARY_REQUEST
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SUMMARY_PROMPT},
                *earlier,
                *span,
                {"role": "user", "content": request},
            ],
            "stream": False,
        }
        if self.tools:
            body["tools"] = self.tools
            body["tool_choice"] = "none"
        return await self._send(body)

    async def _send(self, body: dict[str, Any]) -> str | None:
        self.calls += 1
        reply = await self.post(body)
        choices = reply.get("choices") or []
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        text = content_text(message.get("content")) if isinstance(message, dict) else ""
        return text.strip() or None
