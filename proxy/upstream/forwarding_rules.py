"""What the proxy passes to the upstream and back: request paths with a `.` or `..` segment
are refused, and hop-by-hop headers (and those the proxy sets itself) are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Request headers the proxy sets itself rather than copying from the client.
REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect"}
# Response headers the serving side sets itself; content-length goes because bodies are
# re-framed (chunked) on the way out.
RESPONSE_DROP = HOP_BY_HOP | {"content-length", "date", "server"}
_DOT_SEGMENT = re.compile(r"(^|/)\.{1,2}(/|$)")
_SEPARATORS = re.compile(r"[/\\]")
# Escapes are decoded this many times over: a server or framework behind the upstream URL may
# decode a path more than once.
_DECODE_ROUNDS = 3


def has_dot_segment(path: str) -> bool:
    """True when a segment of `path` is `.` or `..` in any form a server might resolve:
    percent-escaped (`%2e%2e%2f`, also double-escaped), with a backslash for a slash (`..%5c`)
    or with a `;` parameter (`..;/`)."""
    if "%" not in path and ";" not in path and "\\" not in path:
        return _DOT_SEGMENT.search(path) is not None  # the common path: nothing to decode
    for _ in range(_DECODE_ROUNDS + 1):
        for segment in _SEPARATORS.split(path):
            if segment.split(";", 1)[0] in (".", ".."):
                return True
        decoded = unquote(path) if "%" in path else path
        if decoded == path:
            return False
        path = decoded
    return False


def connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Header names listed in `Connection:` are hop-by-hop for this message too."""
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            tokens.update(part.strip().lower() for part in value.split(",") if part.strip())
    return tokens
