"""Request bodies sent compressed (`Content-Encoding: gzip`, `deflate`) on the compacting path.

The proxy must read a session's body to compact it, so it inflates it here, bounded: the
decoded size counts against `server.max_body_bytes` as it is produced (a 40 KB body that
would inflate to gigabytes stops at the limit, with a 413). An encoding the proxy cannot
read is a 415; a body that is not what its header says, a 400. Requests without a session
header are passed through as they came, encoded. Pure code: no I/O.
"""

from __future__ import annotations

import zlib

from proxy.errors import InvalidRequest, PayloadTooLarge

INFLATED = frozenset({"gzip", "x-gzip", "deflate"})
_ANY_HEADER = 32 + zlib.MAX_WBITS  # zlib detects a gzip or a zlib (HTTP "deflate") header


class UnsupportedEncoding(InvalidRequest):
    status = 415
    default_code = "unsupported_content_encoding"
    default_message = "The request's Content-Encoding is not one the proxy can read."


def decoded_body(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """`raw` with the codings of a `Content-Encoding` value undone (last applied first), at
    most `limit` bytes of it; `raw` itself when there is none."""
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
    body = raw
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding not in INFLATED:
            raise UnsupportedEncoding(
                f"Content-Encoding {coding!r} is not supported on this route; send the body "
                "uncompressed, or with gzip or deflate.",
                param="content-encoding",
            )
        body = _inflate(body, limit)
    return body


def _inflate(data: bytes, limit: int) -> bytes:
    """gzip or zlib data inflated, members one after another, never past `limit` bytes."""
    out: list[bytes] = []
    size = 0
    while True:
        inflater = zlib.decompressobj(_ANY_HEADER)
        pending = data
        try:
            while not inflater.eof:
                piece = inflater.decompress(pending, limit - size + 1)
                pending = inflater.unconsumed_tail
                if not piece and not pending:
                    break  # the input ended before the compressed stream did
                size += len(piece)
                if size > limit:
                    raise PayloadTooLarge(
                        f"The decoded request body exceeds the proxy's limit of {limit} bytes."
                    )
                out.append(piece)
        except zlib.error as exc:
            raise _corrupt() from exc
        if not inflater.eof:
            raise _corrupt()
        data = inflater.unused_data
        if not data:
            return b"".join(out)


def _corrupt() -> InvalidRequest:
    return InvalidRequest(
        "The request body is not valid for its Content-Encoding.",
        code="invalid_content_encoding",
        param="content-encoding",
    )
