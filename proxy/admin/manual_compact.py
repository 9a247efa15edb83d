"""POST /admin/sessions/{id}/compact: the seed's `/compact` and `/compact toolcall`.

`toolcall` reclaims old tool results (level 1); `summary` summarises the head (level 2) with
upstream requests in the session's own API (Chat Completions, Responses, or Messages to the
Anthropic upstream), made with the configured key, since the admin API holds no client
credentials. The new state is saved with compare-and-set against the version read.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.admin.base import (
    CompactBody,
    Conflict,
    authorize,
    json_body,
    load_session,
    rebuild_view,
    require_view,
    session_store,
    store_failed,
    wire_of,
)
from proxy.compact import CompactionContext, compact_conversation
from proxy.compaction.summarizer import Summarizer
from proxy.errors import InvalidRequest
from proxy.session.rebuild import Rebuild, apply_compaction
from proxy.session.state import SessionState
from proxy.settings import Settings
from proxy.store import StoredSession, StoreError, VersionConflict
from proxy.trail import counts as trail_counts
from proxy.upstream.client import Upstream
from proxy.wire.base import Wire
from proxy.wire.summary import post_summary

ANTHROPIC_VERSION = "2023-06-01"


def _has_key(settings: Settings, wire: Wire) -> bool:
    """Whether the proxy holds a key of its own for this wire's upstream."""
    key = settings.anthropic_api_key if wire.provider == "anthropic" else settings.upstream_api_key
    return key is not None


def _summary_route(request: Request, wire: Wire) -> tuple[Upstream, dict[str, str]]:
    """The upstream and headers of a manual summary, in the session's own API, made with
    the configured key (the admin API holds no client credentials)."""
    settings: Settings = request.app.state.settings
    if wire.provider == "anthropic":
        key = settings.anthropic_api_key
        if key is None:
            raise Conflict(
                "A summary of a Messages session needs an Anthropic API key: the admin API "
                "has no client credentials to call the model with. Set "
                "XUN_ANTHROPIC_API_KEY (upstream.anthropic_api_key).",
                code="upstream_key_required",
            )
        upstream: Upstream = request.app.state.anthropic_upstream
        headers = upstream.forward_headers({})
        headers["x-api-key"] = key.get_secret_value()
        headers["anthropic-version"] = ANTHROPIC_VERSION
        return upstream, headers
    if settings.upstream_api_key is None:
        raise Conflict(
            "A summary needs an upstream API key: the admin API has no client credentials "
            "to call the model with. Start the proxy with --upstream-api-key "
            "(XUN_UPSTREAM_API_KEY).",
            code="upstream_key_required",
        )
    upstream = request.app.state.upstream
    return upstream, upstream.forward_headers({})


def _summary_post(
    upstream: Upstream, headers: dict[str, str], wire: Wire, failures: list[str]
) -> Any:
    """The summariser's HTTP call: a Chat Completions-shaped request sent in `wire`'s API."""

    async def post(body: dict[str, Any]) -> dict[str, Any]:
        sent = wire.summary_body({}, body)  # no client body: no thinking, no reasoning
        return await post_summary(wire, upstream.post_json, sent, headers, failures)

    return post


def _tools_named_in(rb: Rebuild, wire: Wire) -> list[dict[str, Any]] | None:
    """Minimal definitions of the tools the history calls: some providers refuse tool
    messages without them, and the admin API never saw the client's `tools`. A Messages
    summary goes without: its tool blocks are then sent as text."""
    names: dict[str, None] = {}
    for message in rb.upstream_messages():
        for call in message.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
            if isinstance(name, str) and name:
                names[name] = None
    return wire.summary_tools(list(names))


async def compact_session(request: Request) -> Response:
    authorize(request)
    body = await json_body(request, CompactBody)
    settings: Settings = request.app.state.settings
    stored, state = await load_session(request)
    rb = require_view(rebuild_view(state))
    wire = wire_of(state.wire)
    conv = rb.conversation
    length_before = conv.estimated_message_length()
    failures: list[str] = []
    summary_calls = 0
    result: Any
    if body.mode == "toolcall":
        keep = settings.toolcall_keep_max if body.keep is None else body.keep
        result = conv.compact_toolcall(keep_max=keep)
        changed = result.reclaimed_count > 0
        outcome = "success" if changed else "nothing_to_condense"
    elif not _has_key(settings, wire):
        keep = settings.summary_keep_max if body.keep is None else body.keep
        return await _defer_summary(request, stored, state, len(rb.messages), keep)
    else:
        result, summary_calls = await _summarise(request, body, rb, wire, failures)
        changed = result.ok
        outcome = result.status.value
    tokens_before = state.total_tokens
    apply_compaction(rb)
    version = stored.version
    if changed:
        _record(state, rb, body.mode, result, tokens_before, length_before)
        version = await _save(request, stored, state, len(rb.messages))
    _observe(request, body.mode, outcome, wire, state, (changed, tokens_before))
    _observe_summary(request, body.mode, changed, state, summary_calls)
    payload: dict[str, Any] = {
        **result.to_dict(),
        "mode": body.mode,
        "changed": changed,
        "version": version,
        "total_tokens": state.total_tokens,
    }
    if failures and not changed:
        payload["upstream_error"] = failures[-1]
    return JSONResponse(payload)


async def _summarise(
    request: Request, body: CompactBody, rb: Rebuild, wire: Wire, failures: list[str]
) -> tuple[Any, int]:
    """A manual summary of the session's head: the result and the summary calls it made."""
    settings: Settings = request.app.state.settings
    upstream, headers = _summary_route(request, wire)
    model = body.model or settings.summary_model
    if not model:
        raise InvalidRequest(
            'A summary needs a model: pass "model" in the body, or start the proxy with '
            "--summary-model (XUN_SUMMARY_MODEL).",
            param="model",
            code="model_required",
        )
    summarizer = Summarizer(
        post=_summary_post(upstream, headers, wire, failures),
        model=model,
        tools=_tools_named_in(rb, wire),
    )
    agent = CompactionContext(rb.conversation, summarizer, settings.token_threshold)
    keep = settings.summary_keep_max if body.keep is None else body.keep
    result = await compact_conversation(agent, keep_recent=keep)
    return result, summarizer.calls


def _record(
    state: SessionState,
    rb: Rebuild,
    mode: str,
    result: Any,
    tokens_before: int | None,
    length_before: int,
) -> None:
    """What a manual compaction that changed something leaves in the session's state."""
    length_after = rb.conversation.estimated_message_length()
    if tokens_before is not None and length_before:
        # Same estimate as auto-compaction: scale the last usage by what is left.
        state.total_tokens = int(tokens_before * length_after / length_before)
    state.last_compaction = {
        "level": mode,
        "manual": True,
        "result": result.to_dict(),
        "tokens_before": tokens_before,
        "estimated_tokens_after": state.total_tokens,
    }
    state.turn_log.append(
        {
            "at": time.time(),
            "messages": len(rb.messages),
            "total_tokens": state.total_tokens,
            "prompt_tokens": None,
            "cached_tokens": None,
            "compaction": mode,
            "manual": True,
        }
    )


async def _save(request: Request, stored: StoredSession, state: SessionState, count: int) -> int:
    """The compacted state saved over the one it was read from: its new version."""
    try:
        version: int = await session_store(request).put(
            stored.key, state.to_bytes(), state.meta(count), expected_version=stored.version
        )
    except VersionConflict as exc:
        raise Conflict(
            "The session changed while it was being compacted; try again.",
            code="version_conflict",
        ) from exc
    except StoreError as exc:
        raise store_failed(request, exc) from exc
    return version


def _observe(
    request: Request,
    mode: str,
    outcome: str,
    wire: Wire,
    state: SessionState,
    change: tuple[bool, int | None],
) -> None:
    """The manual compaction in the metrics; `change`: whether it changed the session, and
    the session's tokens before it."""
    changed, tokens_before = change
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.observe_compaction(
            mode,
            outcome,
            "manual",
            wire=wire.name,
            tokens_before=tokens_before if changed else None,
            tokens_after=state.total_tokens if changed else None,
        )


def _observe_summary(
    request: Request, mode: str, changed: bool, state: SessionState, summary_calls: int
) -> None:
    """The summary calls made, and the trail a new summary carries, in the metrics."""
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.summary_calls.inc(summary_calls)
        if changed and mode == "summary" and state.trail:
            for kind, count in trail_counts(state.trail).items():
                metrics.trail_entries.labels(kind=kind).observe(count)


async def _defer_summary(
    request: Request, stored: Any, state: SessionState, messages: int, keep: int
) -> Response:
    """No key of the proxy's own: the summary is made on the session's next turn, with that
    client's credentials (`SessionState.pending_summary`); 202 until then."""
    state.pending_summary = keep
    try:
        version = await session_store(request).put(
            stored.key, state.to_bytes(), state.meta(messages), expected_version=stored.version
        )
    except VersionConflict as exc:
        raise Conflict(
            "The session changed meanwhile; try again.", code="version_conflict"
        ) from exc
    except StoreError as exc:
        raise store_failed(request, exc) from exc
    payload = {
        "mode": "summary",
        "status": "pending",
        "changed": False,
        "version": version,
        "detail": "The proxy holds no upstream key of its own: the summary is made on the "
        "session's next request, with that client's credentials.",
    }
    return JSONResponse(payload, status_code=202)
