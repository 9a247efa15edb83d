"""POST /admin/sessions/{id}/compact: the seed's `/compact` and `/compact toolcall`.

`toolcall` reclaims old tool results (level 1); `summary` summarises the head (level 2) with
one upstream request made with the configured upstream key, since the admin API holds no
client credentials. The new state is saved with compare-and-set against the version read.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.compact import CompactionContext, compact_conversation
from proxy.errors import InvalidRequest, UpstreamError
from proxy.routes.admin_base import (
    CompactBody,
    Conflict,
    authorize,
    json_body,
    load_session,
    rebuild_view,
    require_view,
    session_store,
    store_failed,
)
from proxy.session import Rebuild, apply_compaction
from proxy.settings import Settings
from proxy.store import StoreError, VersionConflict
from proxy.summarizer import ContextLengthExceeded, Summarizer, is_context_length_error
from proxy.trail import counts as trail_counts
from proxy.upstream import Upstream

CHAT_PATH = "/chat/completions"


def _summary_post(upstream: Upstream, failures: list[str]) -> Any:
    """The summariser's HTTP call, made with the configured upstream key."""

    async def post(body: dict[str, Any]) -> dict[str, Any]:
        headers = upstream.forward_headers({})
        status, data, _ = await upstream.post_json(CHAT_PATH, body, headers)
        if status == 200:
            return data
        if is_context_length_error(status, data):
            raise ContextLengthExceeded(str(status))
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        failures.append(f"upstream answered {status}: {message or 'no message'}")
        raise UpstreamError(f"summary request failed with status {status}")

    return post


def _tools_named_in(rb: Rebuild) -> list[dict[str, Any]] | None:
    """Minimal definitions of the tools the history calls: some providers refuse tool
    messages without them, and the admin API never saw the client's `tools`."""
    names: dict[str, None] = {}
    for message in rb.upstream_messages():
        for call in message.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
            if isinstance(name, str) and name:
                names[name] = None
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in names
    ]
    return tools or None


async def compact_session(request: Request) -> Response:
    authorize(request)
    body = await json_body(request, CompactBody)
    settings: Settings = request.app.state.settings
    stored, state = await load_session(request)
    rb = require_view(rebuild_view(state))
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
    else:
        if settings.upstream_api_key is None:
            raise Conflict(
                "A summary needs an upstream API key: the admin API has no client credentials "
                "to call the model with. Start the proxy with --upstream-api-key "
                "(XUN_UPSTREAM_API_KEY).",
                code="upstream_key_required",
            )
        model = body.model or settings.summary_model
        if not model:
            raise InvalidRequest(
                'A summary needs a model: pass "model" in the body, or start the proxy with '
                "--summary-model (XUN_SUMMARY_MODEL).",
                param="model",
                code="model_required",
            )
        summarizer = Summarizer(
            post=_summary_post(request.app.state.upstream, failures),
            model=model,
            tools=_tools_named_in(rb),
        )
        agent = CompactionContext(conv, summarizer, settings.token_threshold)
        keep = settings.summary_keep_max if body.keep is None else body.keep
        result = await compact_conversation(agent, keep_recent=keep)
        summary_calls = summarizer.calls
        changed = result.ok
        outcome = result.status.value
    tokens_before = state.total_tokens
    apply_compaction(rb)
    if changed:
        length_after = conv.estimated_message_length()
        if tokens_before is not None and length_before:
            # Same estimate as auto-compaction: scale the last usage by what is left.
            state.total_tokens = int(tokens_before * length_after / length_before)
        report = {
            "level": body.mode,
            "manual": True,
            "result": result.to_dict(),
            "tokens_before": tokens_before,
            "estimated_tokens_after": state.total_tokens,
        }
        state.last_compaction = report
        state.turn_log.append(
            {
                "at": time.time(),
                "messages": len(rb.messages),
                "total_tokens": state.total_tokens,
                "prompt_tokens": None,
                "cached_tokens": None,
                "compaction": body.mode,
                "manual": True,
            }
        )
    version = stored.version
    if changed:
        try:
            version = await session_store(request).put(
                stored.key,
                state.to_bytes(),
                state.meta(len(rb.messages)),
                expected_version=stored.version,
            )
        except VersionConflict as exc:
            raise Conflict(
                "The session changed while it was being compacted; try again.",
                code="version_conflict",
            ) from exc
        except StoreError as exc:
            raise store_failed(request, exc) from exc
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.observe_compaction(
            body.mode,
            outcome,
            "manual",
            tokens_before=tokens_before if changed else None,
            tokens_after=state.total_tokens if changed else None,
        )
        metrics.summary_calls.inc(summary_calls)
        if changed and body.mode == "summary" and state.trail:
            for kind, count in trail_counts(state.trail).items():
                metrics.trail_entries.labels(kind=kind).observe(count)
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
