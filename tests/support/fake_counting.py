"""Fake upstreams that count a prompt otherwise than the proxy estimates it, as real models do.

The proxy estimates a prompt at chars / 4 plus 4 a message
(`proxy.session.rebuild.estimate_tokens`); a real server bills what its tokenizer and chat template
make of the request, and refuses a prompt over its window by that same count. These are the faithful
fakes of tests/support/fake_upstream.py, tests/support/fake_responses.py and
tests/support/fake_messages.py (same routes, recording and scripting) with another count, used both
for `usage` and against `context_window`, whose refusals keep each API's exact shape:

- `ToolBlindUpstream`: a chat template that leaves tool messages out (llama.cpp's Gemma format
  keeps only user and assistant text). The bill is below the estimate, and reclaiming tool
  results, which shrinks the estimate, does not shrink the bill at all.
- `ScaledUpstream`: a tokenizer that makes `scale` (1.5) tokens of each token the fake's
  faithful count (`count_prompt_tokens`, about the proxy's estimate) sees. The bill is above
  the estimate.
- `ScaledResponses`, `ScaledMessages`: the same for the Responses and Messages APIs.

    with ScaledUpstream(scale=1.5) as fake:
        fake.context_window = 4096   # 400 context_length_exceeded beyond, by the scaled count
"""

from __future__ import annotations

import math
from typing import Any

from tests.support.fake_messages import FakeMessages
from tests.support.fake_responses import FakeResponses
from tests.support.fake_upstream import FakeUpstream, RecordedRequest, count_prompt_tokens

DEFAULT_SCALE = 1.5


def scaled(tokens: int, scale: float) -> int:
    return math.ceil(tokens * scale)


class ToolBlindUpstream(FakeUpstream):
    """The fake OpenAI API whose chat template drops `role: tool` messages from the prompt."""

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        messages = body.get("messages")
        if isinstance(messages, list):
            kept = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "tool")]
            body = {**body, "messages": kept}
        return count_prompt_tokens(body)


class ScaledUpstream(FakeUpstream):
    """The fake OpenAI API whose tokenizer counts `scale` times the faithful count."""

    def __init__(self, scale: float = DEFAULT_SCALE) -> None:
        self.scale = scale
        super().__init__()

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        return scaled(count_prompt_tokens(body), self.scale)


class ScaledResponses(FakeResponses):
    """The fake Responses API whose tokenizer counts `scale` times the faithful count."""

    def __init__(self, scale: float = DEFAULT_SCALE) -> None:
        self.scale = scale
        super().__init__()

    def input_tokens(self, body: dict[str, Any], items: list[dict[str, Any]]) -> int:
        return scaled(super().input_tokens(body, items), self.scale)


class ScaledMessages(FakeMessages):
    """The fake Messages API whose tokenizer counts `scale` times the faithful count.

    The usage keeps Anthropic's split (uncached input, cache creation, cache read), each part
    scaled, adding up to `input_tokens(body)`.
    """

    def __init__(self, scale: float = DEFAULT_SCALE) -> None:
        self.scale = scale
        super().__init__()

    def input_tokens(self, body: dict[str, Any]) -> int:
        return scaled(super().input_tokens(body), self.scale)

    def _input_usage(self, body: dict[str, Any]) -> dict[str, Any]:
        usage = super()._input_usage(body)
        read = int(usage["cache_read_input_tokens"] * self.scale)
        creation = int(usage["cache_creation_input_tokens"] * self.scale)
        usage["cache_read_input_tokens"] = read
        usage["cache_creation_input_tokens"] = creation
        usage["cache_creation"] = {**usage["cache_creation"], "ephemeral_5m_input_tokens": creation}
        usage["input_tokens"] = self.input_tokens(body) - read - creation
        return usage


def chat_refusals(fake: FakeUpstream) -> list[tuple[RecordedRequest, int]]:
    """The chat requests `fake` refused for their length, with the tokens it counted
    (against its window as it is now: set the window before the requests)."""
    window = fake.context_window
    found = []
    for record in fake.chat_requests:
        if window is None or not isinstance(record.json, dict):
            continue
        tokens = fake.prompt_tokens(record.json)
        if tokens > window:
            found.append((record, tokens))
    return found
