"""Reading an upstream's "the prompt is too long" refusal, whoever the provider.

A request over the model's context window is refused with a 400 (413, 422 at some hosts) whose
message each provider words its own way. The proxy reads three things from it: whether it is
such a refusal (`is_length_refusal`: then the turn compacts harder and the summariser splits
its request), the window it names (`window_of`: kept for the session), and how many tokens too
many the request had (`missing_tokens`: how much a retry must remove). One table,
`PHRASINGS`, holds every provider's wording; a row names the numbers it carries:
`window`, `prompt` (the tokens sent) and `extra` (tokens asked for on top, counted against the
window). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LENGTH_STATUSES = (400, 413, 422)
_CODES = ("context_length_exceeded", "exceed_context_size_error")  # `code` or `type`


@dataclass(frozen=True)
class Phrasing:
    """One provider's wording of a length refusal, with named groups for its numbers."""

    provider: str
    pattern: re.Pattern[str]


# A refusal's text is read up to this many characters (providers' run to a few hundred; it
# may quote the request), and a number in it is at most 12 digits, a whole number: each
# `(?P<name>\d+)` of the table is read so, and no search backtracks over a run of digits.
MAX_REFUSAL_CHARS = 4096
_NUMBER = re.compile(r"\(\?P<(\w+)>\\d\+\)")


def _row(provider: str, pattern: str) -> Phrasing:
    bounded = _NUMBER.sub(r"(?<!\\d)(?P<\1>\\d{1,12})(?!\\d)", pattern)
    return Phrasing(provider, re.compile(bounded, re.IGNORECASE | re.DOTALL))


PHRASINGS = (
    # OpenAI, Azure OpenAI, vLLM, DeepSeek, OpenRouter, Groq: "This model's maximum context
    # length is 8192 tokens. However, your messages resulted in 9000 tokens." / "... you
    # requested 5000 tokens (4000 in the messages, 1000 in the completion)." / "... your
    # request has 3000 input tokens."
    _row(
        "openai",
        r"maximum context length[^0-9]{0,40}?(?P<window>\d+)"
        r"(?:.*?(?:resulted in|requested(?: about)?|request has) (?P<prompt>\d+))?",
    ),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    _row("anthropic", r"(?P<prompt>\d+)\s*tokens?\s*>\s*(?P<window>\d+)"),
    # Anthropic, output included: "input length and `max_tokens` exceed context limit:
    # 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"
    _row(
        "anthropic-max-tokens",
        r"exceed context limit:\s*(?P<prompt>\d+)\s*\+\s*(?P<extra>\d+)\s*>\s*(?P<window>\d+)",
    ),
    # llama.cpp server: "request (4476 tokens) exceeds the available context size (4096 tokens)"
    _row(
        "llama.cpp",
        r"request \((?P<prompt>\d+) tokens?\) exceeds the available context size"
        r" \((?P<window>\d+) tokens?\)",
    ),
    # Mistral: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with
    # 32768 maximum context length"
    _row(
        "mistral",
        r"prompt contains (?P<prompt>\d+) tokens.*?too large for model with (?P<window>\d+)"
        r" maximum context length",
    ),
    # Hugging Face TGI (Together, Fireworks-style hosts): "Input validation error: `inputs`
    # tokens + `max_new_tokens` must be <= 8192. Given: 9000 `inputs` tokens and 100
    # `max_new_tokens`"
    _row(
        "tgi",
        r"must be <= (?P<window>\d+)\. Given: (?P<prompt>\d+) `inputs` tokens"
        r" and (?P<extra>\d+) `max_new_tokens`",
    ),
    # Gemini (also through its OpenAI-compatible endpoint): "The input token count (1200000)
    # exceeds the maximum number of tokens allowed (1048576)."
    _row(
        "gemini",
        r"input token count \(?(?P<prompt>\d+)\)? exceeds the maximum number of tokens"
        r" allowed \(?(?P<window>\d+)\)?",
    ),
    # OpenAI Responses and others that name a window and nothing sent: "... exceeds the
    # context window of 128000 tokens"; without a number it still marks the refusal.
    _row("context-window", r"context window(?:[^0-9]{0,40}(?P<window>\d{3,}))?"),
    # Wordings with no numbers: Bedrock ("Input is too long for requested model."), llama.cpp's
    # older "the request exceeds the available context size, try increasing it", and the
    # generic ones many OpenAI-compatible servers use.
    _row(
        "generic",
        r"context_length_exceeded|context length|too many tokens|prompt is too long"
        r"|input is too long|reduce the length|exceeds the available context size"
        r"|exceed context limit",
    ),
)


def _error(body: Any) -> dict[str, Any] | None:
    """The error object: `{"error": {...}}`, or the first of a list (Gemini's compatible
    endpoint answers `[{"error": {...}}]`)."""
    if isinstance(body, list) and body:
        body = body[0]
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else None


def refusal_text(body: Any) -> str:
    """The refusal's message: the error object's, else a top-level `error` or `message` string
    (TGI; vLLM's and Mistral's flat error objects, Bedrock), else the whole body as text."""
    err = _error(body)
    if err is not None:
        return str(err.get("message") or "")
    if isinstance(body, dict):
        for key in ("error", "message"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return str(body if body is not None else "")


def _match(body: Any) -> re.Match[str] | None:
    text = refusal_text(body)[:MAX_REFUSAL_CHARS]
    for phrasing in PHRASINGS:
        found = phrasing.pattern.search(text)
        if found:
            return found
    return None


def is_length_refusal(status: int, body: Any) -> bool:
    """Whether an upstream error answer means "the prompt is too long"."""
    if status not in LENGTH_STATUSES:
        return False
    err = _error(body)
    if err is not None and (err.get("code") in _CODES or err.get("type") in _CODES):
        return True
    return _match(body) is not None


def _numbers(body: Any) -> dict[str, int]:
    found = _match(body)
    numbers = {k: int(v) for k, v in found.groupdict().items() if v} if found else {}
    err = _error(body)
    if err is not None:  # llama.cpp also sends them as fields
        for key, field in (("window", "n_ctx"), ("prompt", "n_prompt_tokens")):
            value = err.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and key not in numbers:
                numbers[key] = value
    return numbers


def window_of(body: Any) -> int | None:
    """The context window a length refusal names, if it does."""
    return _numbers(body).get("window")


def missing_tokens(body: Any) -> int | None:
    """How many tokens too many the refused request had, when the refusal says."""
    numbers = _numbers(body)
    if "window" not in numbers or "prompt" not in numbers:
        return None
    return max(0, numbers["prompt"] + numbers.get("extra", 0) - numbers["window"])
