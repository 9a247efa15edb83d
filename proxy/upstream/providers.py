"""Which provider a request is for, and which credential headers never reach the other one.

A request that carries one of Anthropic's headers (`x-api-key`, `anthropic-version`,
`anthropic-beta`) is Anthropic's, on every `/v1/...` path: it goes to the Anthropic upstream
(`upstream.anthropic_base_url`), never to `--upstream` with its key. What goes upstream also
loses the other provider's credentials: the OpenAI side never gets `x-api-key`; the Anthropic
side never gets Azure OpenAI's `api-key`, nor an `Authorization` on a request that does not
say it is Anthropic's (a `/v1/messages/...` call made with an OpenAI key).

Pure: header names in, decisions out.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Literal

Provider = Literal["openai", "anthropic"]
ANTHROPIC_HEADERS = ("x-api-key", "anthropic-version", "anthropic-beta")
_MARKERS = frozenset(name.encode("ascii") for name in ANTHROPIC_HEADERS)
_NOT_OPENAI = frozenset({"x-api-key"})
_NOT_ANTHROPIC = frozenset({"api-key"})
_NOT_ANTHROPIC_UNMARKED = _NOT_ANTHROPIC | {"authorization"}


def is_anthropic(headers: Container[str]) -> bool:
    """Whether a request's headers (lower-case names, or a case-blind mapping) say it is
    for Anthropic's API."""
    return any(name in headers for name in ANTHROPIC_HEADERS)


def is_anthropic_raw(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """`is_anthropic` of an ASGI scope's header list (lower-case names), in one pass."""
    return any(name in _MARKERS for name, _ in headers)


def foreign_credentials(provider: Provider, headers: Container[str]) -> frozenset[str]:
    """The credential headers of this request that must not go to `provider`."""
    if provider == "openai":
        return _NOT_OPENAI
    return _NOT_ANTHROPIC if is_anthropic(headers) else _NOT_ANTHROPIC_UNMARKED


__all__ = [
    "ANTHROPIC_HEADERS",
    "Provider",
    "foreign_credentials",
    "is_anthropic",
    "is_anthropic_raw",
]
