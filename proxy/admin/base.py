"""What every admin route shares: auth, the request models, and loading a session.

Auth: `Authorization: Bearer <admin key>` when a key is configured; without one, the admin
API answers only when the proxy binds to a loopback address (anyone who can reach a wider
bind could otherwise read every session), and only to requests for a loopback `Host`
(`localhost`, `127.x.y.z`, `[::1]`, any port; parsed exactly by `proxy.setting_values`) or one of
`server.allowed_hosts`: a web page that rebinds its own DNS name to 127.0.0.1 still sends
its own name. Bodies must be `application/json`, which a web page
cannot send to another origin without the CORS preflight the proxy never grants.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request

from proxy.admin.times import parse_time
from proxy.errors import InvalidRequest, NotFound, ProxyError, ServiceUnavailable, Unauthorized
from proxy.session.history import UnrecognisedHistory
from proxy.session.rebuild import Rebuild, rebuild
from proxy.session.state import SessionState
from proxy.setting_values import allowed_host
from proxy.settings import Settings
from proxy.store import SessionKey, Store, StoredSession, StoreError, StoreFull
from proxy.wire.apis import wire_named
from proxy.wire.base import Wire

log = logging.getLogger("proxy.admin")

_M = TypeVar("_M", bound=BaseModel)


class Forbidden(InvalidRequest):
    status = 403
    type = "permission_error"
    default_code = "admin_disabled"


class Conflict(InvalidRequest):
    status = 409
    default_code = "conflict"


class UnsupportedMediaType(InvalidRequest):
    status = 415
    default_code = "unsupported_media_type"


# -- auth ----------------------------------------------------------------------------------


def authorize(request: Request) -> None:
    """Raise unless this request may use the admin API."""
    settings: Settings = request.app.state.settings
    if settings.admin_key is None:
        if not settings.is_loopback:
            raise Forbidden(
                f"The admin API is disabled: the proxy listens on {settings.host}, which is not "
                "a loopback address, and no admin key is set. Start it with --admin-key "
                "(XUN_ADMIN_KEY) to enable /admin."
            )
        if not allowed_host(request.headers.get("host", ""), settings.allowed_hosts):
            raise Forbidden(
                "Without an admin key the admin API answers only requests for localhost, "
                "127.0.0.1, [::1] or a name given with --allowed-host; set --admin-key "
                "(XUN_ADMIN_KEY) to use another host name.",
                code="admin_host_refused",
            )
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not settings.check_admin_key(token.strip()):
        raise Unauthorized(
            "Missing or invalid admin key: send 'Authorization: Bearer <admin key>'.",
            code="invalid_admin_key",
            headers={"www-authenticate": 'Bearer realm="xun-proxy admin"'},
        )


def admin_enabled(request: Request) -> None:
    """Raise unless the admin API can be used at all (the page needs no key to load)."""
    settings: Settings = request.app.state.settings
    if settings.admin_key is None:
        authorize(request)  # the bind and the Host rules of a key-less admin


# -- request bodies and queries ------------------------------------------------------------


class ListQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(50, ge=1, le=1000, description="rows per page")
    cursor: str | None = Field(None, description="next_cursor of the previous page")
    tenant: str | None = Field(None, description="only this tenant's sessions")
    updated_after: float | None = Field(
        None, description="only sessions updated after this time (epoch seconds or ISO 8601)"
    )

    @field_validator("updated_after", mode="before")
    @classmethod
    def _parse_time(cls, value: Any) -> Any:
        return parse_time(value, naive_is_utc=False) if isinstance(value, str) else value


class DetailQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    truncate: bool = Field(False, description="cut each message's text at 1000 characters")


class CompactBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["summary", "toolcall"]
    keep: int | None = Field(
        None,
        ge=0,
        description="tool results kept (toolcall) or messages kept (summary); "
        "defaults to toolcall_keep_max / summary_keep_max",
    )
    model: str | None = Field(
        None, min_length=1, description="model for the summary; defaults to --summary-model"
    )


def validate(model: type[_M], data: Any) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        message = f"{param}: {first['msg']}" if param else str(first["msg"])
        raise InvalidRequest(message, param=param, code="invalid_value") from exc


def query_model(request: Request, model: type[_M]) -> _M:
    return validate(model, dict(request.query_params))


async def json_body(request: Request, model: type[_M]) -> _M:
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType(
            "Send the body as JSON, with 'Content-Type: application/json'.", param="content-type"
        )
    raw = await request.body()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest("The body must be a JSON object.", code="invalid_json") from exc
    return validate(model, data)


# -- loading -------------------------------------------------------------------------------


def session_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


async def settled(request: Request, session_id: str | None = None) -> None:
    """Wait for this process's saves of the session (of every session without an id),
    which land just after their answers went out."""
    writer = getattr(request.app.state, "writer", None)
    if writer is not None:
        await (writer.idle() if session_id is None else writer.settled(session_id))


def store_failed(request: Request, exc: StoreError) -> ServiceUnavailable:
    log.warning("admin: session store failed: %s", type(exc).__name__)
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.store_errors.inc()
    if isinstance(exc, StoreFull):
        message = (
            "The session store is full (its disk, or Redis's memory): make room as the "
            "reliability guide says (docs/reliability.md: a full disk), then try again."
        )
        return ServiceUnavailable(message, code="store_full")
    return ServiceUnavailable("The session store failed.", code="store_unavailable")


async def load_session(request: Request) -> tuple[StoredSession, SessionState]:
    stored = await find_session(request)
    if stored.damaged:
        message = (
            "The stored session is damaged (its metadata is unreadable); its next request "
            "starts it afresh, or delete it."
        )
        raise ProxyError(message, code="state_unreadable")
    try:
        state = SessionState.from_bytes(stored.data)
    except Exception as exc:  # a foreign or corrupt record: say so rather than 500
        message = "The stored session state is unreadable."
        raise ProxyError(message, code="state_unreadable") from exc
    return stored, state


async def find_session(request: Request) -> StoredSession:
    """The stored row of the route's session, read or not (a damaged one can be deleted)."""
    session_id = request.path_params["id"]
    if not SessionKey.is_valid_id(session_id):
        raise NotFound(f"No session {session_id!r}.", code="session_not_found")
    await settled(request, session_id)
    try:
        stored = await session_store(request).get_by_id(session_id)
    except StoreError as exc:
        raise store_failed(request, exc) from exc
    if stored is None:
        raise NotFound(f"No session {session_id!r}.", code="session_not_found")
    return stored


def wire_of(name: str | None) -> Wire:
    """The adapter of a session's API (sessions saved before the proxy noted it: chat)."""
    return wire_named(name)


def rebuild_view(state: SessionState) -> Rebuild | None:
    """The conversation as the upstream sees it now, or None when it was not kept.

    Hidden extract calls of the last reply join a message the client has not sent back yet,
    so the view (the client's last messages) ends before them: they stay in the state, so a
    manual compaction saved from this view keeps them.
    """
    messages = state.view_messages()
    if messages is None:
        return None
    pending = [h for h in state.hidden if h.anchor >= len(messages)]
    try:
        rb = rebuild(messages, state, unmerge=wire_of(state.wire).unmerge)
    except UnrecognisedHistory:
        return None
    rb.state.hidden.extend(h for h in pending if h not in rb.state.hidden)
    return rb


def require_view(rb: Rebuild | None) -> Rebuild:
    if rb is None:
        raise Conflict(
            "This session's last messages were not kept (none recorded yet, or too large), "
            "so there is no conversation to show or compact until its next request.",
            code="conversation_not_kept",
        )
    return rb
