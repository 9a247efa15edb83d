"""Who may spend the operator's key: the rules of a proxy started with `--upstream-api-key`.

Such a proxy adds `Authorization: Bearer <operator key>` to what it sends the OpenAI-side
upstream, so whoever reaches it spends that key; a web page must not. Every `/v1/...`
request is then refused, in the shape of the API it came through, when:

- its `Host` is not a loopback name (`localhost`, `127.x.y.z`, `[::1]`, any port) nor one of
  `server.allowed_hosts` (403 `host_not_allowed`): a page that rebinds its own DNS name to
  the proxy's address still sends its own name;
- it carries an `Origin` whose host is not one of those (403 `origin_not_allowed`; the
  opaque origin `null` included): a browser names the page behind every cross-site POST;
- it is a POST (any path under `/v1/`, a trailing slash or a route the proxy only passes
  through included) whose `Content-Type` is not `application/json`, nor, on the upload
  routes below, `multipart/form-data` (415 `unsupported_media_type`): a page can send
  `text/plain`, a form or no type at all cross-site without asking (no CORS preflight),
  never JSON. The upload routes are the ones whose requests the official SDKs send as
  multipart (`UPLOAD_ROUTES`; `/v1/realtime/calls` also takes `application/sdp`); there the
  Host and Origin checks are what stands between a page and the key.

Without an operator key each request spends the client's own key, and nothing here applies.
The host parsing is `proxy.setting_values`', the same as the key-less admin API's.
`origin_refusal` is pure; `OriginGuardMiddleware` is the ASGI glue, installed only when the
proxy holds a key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.errors import InvalidRequest, ProxyError
from proxy.server.guard import refusal
from proxy.setting_values import allowed_host, allowed_origin

API_PREFIX = "/v1"
# The model routes, and the wire each one's requests are logged and counted under.
MODEL_ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}


_SEGMENT = "[^/]+"
# POST routes whose bodies the official SDKs (openai, anthropic) send as multipart/form-data:
# uploads of files, audio, images, videos and skills. `{id}` is one path segment.
UPLOAD_ROUTES = (
    "/v1/files",
    "/v1/uploads/{id}/parts",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/audio/voices",
    "/v1/audio/voice_consents",
    "/v1/images/edits",
    "/v1/images/variations",
    "/v1/videos",
    "/v1/videos/edits",
    "/v1/videos/extensions",
    "/v1/videos/characters",
    "/v1/containers/{id}/files",
    "/v1/skills",
    "/v1/skills/{id}/versions",
    "/v1/content_provenance_checks",
    "/v1/realtime/calls",
)
_UPLOAD = re.compile(
    "(?:"
    + "|".join(re.escape(route).replace(re.escape("{id}"), _SEGMENT) for route in UPLOAD_ROUTES)
    + ")/?"
)
_JSON = frozenset({"application/json"})
_UPLOAD_TYPES = frozenset({"application/json", "multipart/form-data"})
_CALL_TYPES = _UPLOAD_TYPES | {"application/sdp"}


def accepted_types(path: str) -> frozenset[str]:
    """The media types a POST to `path` may carry when it spends the operator's key."""
    match = _UPLOAD.fullmatch(path)
    if match is None:
        return _JSON
    if path.rstrip("/") == "/v1/realtime/calls":
        return _CALL_TYPES
    return _UPLOAD_TYPES


class Forbidden(InvalidRequest):
    status = 403
    type = "permission_error"


class UnsupportedMediaType(InvalidRequest):
    status = 415
    default_code = "unsupported_media_type"


# A client sends the same Host (and Origin) on every request: judge each value once.
_host_ok = lru_cache(maxsize=256)(allowed_host)
_origin_ok = lru_cache(maxsize=256)(allowed_origin)
_WATCHED = frozenset({b"host", b"origin", b"content-type"})


def _watched(headers: Sequence[tuple[bytes, bytes]]) -> dict[bytes, list[str]]:
    """The Host, Origin and Content-Type values, in one pass over the header list."""
    found: dict[bytes, list[str]] = {b"host": [], b"origin": [], b"content-type": []}
    for key, value in headers:
        if key in _WATCHED:
            found[key].append(value.decode("latin-1"))
    return found


def origin_refusal(scope: Scope, allowed: tuple[str, ...]) -> ProxyError | None:
    """Why this request may not spend the operator's key, or None (see the module doc)."""
    path: str = scope["path"]
    if not (path == API_PREFIX or path.startswith(API_PREFIX + "/")):
        return None
    found = _watched(scope["headers"])
    hosts = found[b"host"]
    if len(hosts) != 1 or not _host_ok(hosts[0], allowed):
        return Forbidden(
            "This proxy adds its own upstream key, so it serves only requests for localhost, "
            "127.0.0.1, [::1] or a name given with --allowed-host (XUN_ALLOWED_HOSTS).",
            code="host_not_allowed",
        )
    if not all(_origin_ok(origin, allowed) for origin in found[b"origin"]):
        return Forbidden(
            "This proxy adds its own upstream key, so it refuses requests from web pages of "
            "other origins; an allowed origin's host is loopback or given with --allowed-host.",
            code="origin_not_allowed",
        )
    if scope["method"] == "POST":
        types = found[b"content-type"]
        media = types[0].partition(";")[0].strip().lower() if len(types) == 1 else ""
        accepted = accepted_types(path)
        if media not in accepted:
            if accepted is _JSON:
                message = "Send the body as JSON, with 'Content-Type: application/json'."
            else:
                names = " or ".join(f"'{name}'" for name in sorted(accepted))
                message = f"Send the body with 'Content-Type' {names}."
            return UnsupportedMediaType(
                message + " This proxy adds its own upstream key, so it takes no other type.",
                param="content-type",
            )
    return None


class OriginGuardMiddleware:
    """Pure ASGI: refuse what `origin_refusal` refuses, before any route reads the body."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = origin_refusal(scope, self.allowed)
            if refused is not None:
                fields = scope.get("state", {}).get("log_fields")
                if isinstance(fields, dict) and scope["path"] in MODEL_ROUTES:
                    fields["wire"] = MODEL_ROUTES[scope["path"]]  # counted under its wire
                await refusal(scope, refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)


__all__ = [
    "MODEL_ROUTES",
    "UPLOAD_ROUTES",
    "OriginGuardMiddleware",
    "accepted_types",
    "origin_refusal",
]
