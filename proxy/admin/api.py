"""The admin API under /admin: list, inspect, export, compact and delete sessions.

The conversation shown is the one the upstream sees now: the client's last messages (kept
compressed in the state) rebuilt under the session's state. Auth and loading live in
`proxy.admin.base`, manual compaction in `proxy.admin.manual_compact`.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from proxy.admin.base import (
    DetailQuery,
    ListQuery,
    authorize,
    find_session,
    load_session,
    query_model,
    rebuild_view,
    require_view,
    session_store,
    settled,
    store_failed,
)
from proxy.admin.manual_compact import compact_session
from proxy.admin.savings import price_table, savings_endpoint, session_savings
from proxy.admin.view import content_text, is_mid_system, message_items, wire_type
from proxy.conversation import Conversation
from proxy.conversation_message import RawOpenAIMessage, SystemPrompt, content_to_text
from proxy.errors import InvalidRequest, NotFound
from proxy.session import asked_back
from proxy.session.history import HIDDEN_KEY_PREFIX
from proxy.session.identity import session_header
from proxy.session.rebuild import Rebuild
from proxy.session.state import SessionState
from proxy.store import SessionInfo, StoreError
from proxy.trail import counts as trail_counts
from proxy.trail import render as render_trail

ADMIN_PREFIX = "/admin"


# -- views ---------------------------------------------------------------------------------


def _counters(state: SessionState) -> dict[str, int]:
    return {
        "summary_rounds": state.summary_rounds,
        "toolcall_rounds": state.toolcall_rounds,
        "toolcall_reclaimed": state.toolcall_reclaimed,
        "resets": state.resets,
    }


def _trail(state: SessionState) -> dict[str, Any] | None:
    """The artifact trail kept with the summary: counts, the section the model reads, entries."""
    if not state.trail:
        return None
    entries = state.trail.get("entries")
    return {
        "counts": trail_counts(state.trail),
        "budget": state.trail.get("budget"),
        "rendered": render_trail(state.trail),
        "entries": list(reversed(entries)) if isinstance(entries, list) else [],  # newest first
    }


def _row(info: SessionInfo) -> dict[str, Any]:
    meta = info.meta
    return {
        "id": info.id,
        "object": "session",
        "session": session_header(info.key.session),
        "tenant": info.key.tenant,
        "wire": meta.get("wire") or "chat",
        "messages": meta.get("messages"),
        "total_tokens": meta.get("total_tokens"),
        "counters": {
            "summary_rounds": meta.get("summary_rounds", 0),
            "toolcall_rounds": meta.get("toolcall_rounds", 0),
        },
        "reclaimed": meta.get("reclaimed", 0),
        "has_summary": bool(meta.get("has_summary")),
        "updated_at": info.updated_at,
        "version": info.version,
        "size": info.size,
    }


def _text(message: RawOpenAIMessage, truncate: bool) -> str:
    """`to_history()`'s text of a message, with binary parts named instead of dumped."""
    lines = [content_text(message.content, truncate)]
    for call in message.raw.get("tool_calls") or []:
        function = (call.get("function") if isinstance(call, dict) else None) or {}
        lines.append(f"[tool call] {function.get('name')}({function.get('arguments')})")
    return "\n".join(line for line in lines if line)


def history(rb: Rebuild, truncate: bool) -> list[dict[str, Any]]:
    """`to_history()` records, marked so a viewer can expand placeholders and the summary.

    Messages of the Responses and Messages wires also get their model turn's `items`
    (reasoning, thinking, calls, text: `proxy.admin.view`), the `wire_type` of the
    original they came from, and `system` when they are a system message mid-conversation.
    """
    conv = rb.conversation
    reclaimed = set(conv.reclaimed_keys())
    records: list[dict[str, Any]] = []
    pairs = list(zip(conv.messages, conv.to_history(truncate=truncate), strict=True))
    fixed = rb.messages[rb.system_count : rb.floor]  # up to a provider's compaction, as sent
    if fixed:
        kept = Conversation([RawOpenAIMessage(m) for m in fixed])
        at = 1 if pairs and isinstance(pairs[0][0], SystemPrompt) else 0
        pairs[at:at] = zip(kept.messages, kept.to_history(truncate=truncate), strict=True)
    for message, record in pairs:
        out: dict[str, Any] = dict(record)
        if isinstance(message, SystemPrompt):
            out["kind"] = "system"
            out["summary"] = message.content if message.is_compressed else None
            out["sections"] = dict(message.persist_sections)
        elif isinstance(message, RawOpenAIMessage):
            out["kind"] = "message"
            out["content"] = _text(message, truncate)
            if message.tool_call_id is not None:
                out["tool_call_id"] = message.tool_call_id
            if message.key in reclaimed:
                out["compacted_id"] = message.key
            if message.key is not None and message.key.startswith(HIDDEN_KEY_PREFIX):
                out["hidden"] = True  # an extract call the client never saw
            items = message_items(message.raw, truncate)
            if items is not None:
                out["items"] = items
            kind = wire_type(message.raw)
            if kind is not None:
                out["wire_type"] = kind
            if is_mid_system(message.raw):
                out["system"] = True
        else:
            out["kind"] = "message"
        records.append(out)
    return records


# -- routes --------------------------------------------------------------------------------


async def list_sessions(request: Request) -> Response:
    authorize(request)
    query = query_model(request, ListQuery)
    await settled(request)
    try:
        infos, cursor = await session_store(request).list(
            tenant=query.tenant,
            updated_after=query.updated_after,
            limit=query.limit,
            cursor=query.cursor,
        )
    except ValueError as exc:  # a malformed cursor
        raise InvalidRequest(str(exc), param="cursor", code="invalid_cursor") from exc
    except StoreError as exc:
        raise store_failed(request, exc) from exc
    return JSONResponse(
        {
            "object": "list",
            "data": [_row(info) for info in infos],
            "next_cursor": cursor,
            "has_more": cursor is not None,
        }
    )


async def session_detail(request: Request) -> Response:
    authorize(request)
    query = query_model(request, DetailQuery)
    stored, state = await load_session(request)
    kept = state.to_dict()  # as stored: read before the rebuild below re-checks hidden calls
    for bulky in ("view", "turn_log", "hidden", "summary", "trail", "last_compaction"):
        kept.pop(bulky, None)
    kept["hidden"] = len(state.hidden)
    rb = rebuild_view(state)
    body = {
        "id": stored.key.id,
        "object": "session",
        "session": session_header(stored.key.session),
        "tenant": stored.key.tenant,
        "wire": state.wire or "chat",
        "version": stored.version,
        "updated_at": stored.updated_at,
        "meta": stored.meta,
        "state": kept,
        "summary": state.summary,
        "trail": _trail(state),
        "total_tokens": state.total_tokens,
        "counters": _counters(state),
        "reclaimed": list(state.reclaimed),
        "turns": state.turns,
        "savings": session_savings(state, price_table(request)),
        # What the model asked back, per tool, and level 1's policy for each.
        "lookback": asked_back.table(
            *asked_back.clean_counts(state.lookback, state.searches),
            learning=bool(request.app.state.settings.adaptive_reclaim),
        ),
        "last_compaction": state.last_compaction,
        "pending_summary": state.pending_summary is not None,
        "conversation": None if rb is None else history(rb, query.truncate),
        "upstream_messages": None if rb is None else len(rb.conversation.messages),
        "token_threshold": request.app.state.settings.token_threshold,
    }
    return JSONResponse(body)


async def export_session(request: Request) -> Response:
    authorize(request)
    stored, state = await load_session(request)
    rb = require_view(rebuild_view(state))
    wire = state.wire or "chat"
    # The conversation's own save format (Conversation.loads reads it), the wire beside it.
    saved = {**rb.conversation.to_saved(), "wire": wire}
    return Response(
        json.dumps(saved, ensure_ascii=False),
        media_type="application/json",
        headers={
            "content-disposition": f'attachment; filename="session-{stored.key.id}.json"',
            "x-xun-wire": wire,
        },
    )


async def compacted_original(request: Request) -> Response:
    authorize(request)
    _, state = await load_session(request)
    rb = require_view(rebuild_view(state))
    key = request.path_params["tool_call_id"]
    if key not in rb.originals:
        raise NotFound(f"No tool result {key!r} in this session.", code="tool_result_not_found")
    content = rb.originals[key]
    return JSONResponse(
        {
            "id": key,
            "reclaimed": key in set(rb.conversation.reclaimed_keys()),
            "content": content,
            "text": content_to_text(content),
        }
    )


async def delete_session(request: Request) -> Response:
    authorize(request)
    stored = await find_session(request)  # a damaged or unreadable one too
    try:
        deleted = await session_store(request).delete(stored.key)
    except StoreError as exc:
        raise store_failed(request, exc) from exc
    return JSONResponse({"id": stored.key.id, "object": "session.deleted", "deleted": deleted})


def admin_routes() -> list[BaseRoute]:
    """The /admin API routes (the viewer page is added by `proxy.admin.page`)."""
    p = ADMIN_PREFIX + "/sessions"
    return [
        Route(ADMIN_PREFIX + "/savings", savings_endpoint, methods=["GET"]),
        Route(p, list_sessions, methods=["GET"]),
        Route(p + "/{id}", session_detail, methods=["GET"]),
        Route(p + "/{id}", delete_session, methods=["DELETE"]),
        Route(p + "/{id}/export", export_session, methods=["GET"]),
        Route(p + "/{id}/compact", compact_session, methods=["POST"]),
        Route(p + "/{id}/compacted/{tool_call_id:path}", compacted_original, methods=["GET"]),
    ]
