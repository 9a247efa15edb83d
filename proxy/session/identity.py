"""Who a request belongs to: its tenant (from the credential) and its session id (a header).

The tenant is a short hash of the credential the upstream will check, read from the first of
`CREDENTIAL_HEADERS` that is present and not empty: `Authorization` (OpenAI), `x-api-key`
(Anthropic), `api-key` (Azure OpenAI). Two keys never share a tenant, whichever header
carries them, and a request with no credential at all is the tenant `anonymous`, which no
credential hashes to (a hash is 16 hex digits). `Authorization` is hashed as it always was,
so sessions stored before the other headers counted keep their tenant; the others are hashed
with their header name in front, after a newline no header value can hold, so a value under
one header never lands in the tenant of the same value under another.

With `session.tenant_header` set (off by default), a request that carries that header gets
the tenant of its value instead, hashed under the header's name, so it never equals a
credential's tenant: a rotated credential (Claude Code's OAuth token refreshes every few
hours) keeps its sessions. Whoever can set that header can join the tenant it names, so the
operator names one that a trusted gateway sets, or uses it where every client is trusted.

A session is also keyed by its wire: one id used by a Chat Completions agent and by a
Messages one is two histories, and each keeps its state while the other runs. The store's
session part is the id for Chat Completions (the keys sessions had before wires counted),
else the id, a newline (which no header value holds) and the wire (`session_key`);
`session_header` reads the id back for display.

HTTP header values arrive as latin-1 text (one character a byte). A session id a client sent
in UTF-8 is decoded as UTF-8 when its bytes are valid UTF-8, so it reads as sent in the admin
API, the logs and the store's keys. Pure code: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key")
ANONYMOUS = "anonymous"


def _tag(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def tenant_of(credentials: Mapping[str, str] | str | None, tenant_header: str | None = None) -> str:
    """A short, stable, non-reversible tag of the request's credential, or of the value of
    `tenant_header` (a name the operator configured) when the request carries it.

    `credentials` is the request's headers (any case-insensitive mapping, or a plain dict
    with lower-case names), or, as before headers other than `Authorization` counted, the
    `Authorization` value alone.
    """
    if credentials is None or isinstance(credentials, str):
        return _tag(credentials) if credentials else ANONYMOUS
    if tenant_header:
        name = tenant_header.lower()
        stable = credentials.get(name)
        if stable:
            # Two newlines no header value holds: apart from every credential's tag.
            return _tag(f"tenant\n{name}\n{header_text(stable)}")
    for name in CREDENTIAL_HEADERS:
        value = credentials.get(name)
        if value:
            return _tag(value) if name == "authorization" else _tag(f"{name}\n{value}")
    return ANONYMOUS


WIRE_MARK = "\n"  # no header value holds one, so no session id does
KEYED_AS_BEFORE = "chat"  # the wire whose sessions keep the keys stored before wires counted


def session_key(session_id: str, wire: str) -> str:
    """The session part of a store key: `session_id`, with the wire after `WIRE_MARK` unless
    it is Chat Completions."""
    return session_id if wire == KEYED_AS_BEFORE else f"{session_id}{WIRE_MARK}{wire}"


def session_header(stored: str) -> str:
    """The session id a store key's session part was made from (`session_key`)."""
    return stored.split(WIRE_MARK, 1)[0]


def header_text(value: str) -> str:
    """A header value as the client wrote it: UTF-8 when its bytes are valid UTF-8."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value  # not latin-1 text (already decoded) or not UTF-8: keep it as it came


def session_id_of(headers: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The session id: the first of the session headers present and not empty, as text."""
    for name in names:
        value = headers.get(name)
        if value:
            return header_text(value)
    return None


__all__ = [
    "ANONYMOUS",
    "CREDENTIAL_HEADERS",
    "header_text",
    "session_header",
    "session_id_of",
    "session_key",
    "tenant_of",
]
