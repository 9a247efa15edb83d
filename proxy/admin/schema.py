"""An OpenAPI 3.1 description of the admin API, served at /admin/openapi.json.

Bodies and queries come from the same pydantic models the routes validate with, so the
document cannot drift from what the routes accept.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from proxy import __version__
from proxy.admin.base import CompactBody, DetailQuery, ListQuery
from proxy.admin.savings import SavingsQuery

_ERROR = {"$ref": "#/components/schemas/Error"}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "in": "query",
            "required": name in required,
            "description": prop.get("description", ""),
            "schema": {k: v for k, v in prop.items() if k not in ("description", "title")},
        }
        for name, prop in schema["properties"].items()
    ]


def _path_parameter(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _responses(ok: str, ok_schema: dict[str, Any], *errors: int) -> dict[str, Any]:
    reasons = {
        400: "invalid query or body",
        401: "missing or wrong admin key",
        403: "admin disabled: non-loopback bind without an admin key",
        404: "no such session or tool result",
        409: "nothing kept to show, a concurrent update, or no upstream key for a summary",
        503: "the session store failed",
    }
    out: dict[str, Any] = {
        "200": {"description": ok, "content": {"application/json": {"schema": ok_schema}}}
    }
    for status in (401, 403, 503, *errors):
        out[str(status)] = {
            "description": reasons[status],
            "content": {"application/json": {"schema": _ERROR}},
        }
    return out


def openapi() -> dict[str, Any]:
    """The document; a fresh dict each call."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "xun-proxy admin API", "version": __version__},
        "security": [{"adminKey": []}],
        "paths": _paths(),
        "components": _components(),
    }


def _paths() -> dict[str, Any]:
    """The admin routes, each with its parameters, body and answers."""
    session_id = _path_parameter("id", "opaque session id from the list")
    obj: dict[str, Any] = {"type": "object"}
    return {
        "/admin/savings": {
            "get": {
                "operationId": "getSavings",
                "summary": "Tokens and money saved in a time window: totals, groups, hourly "
                "series, shadow turns' projected savings apart, and what the models asked "
                "back by tool",
                "parameters": _query_parameters(SavingsQuery),
                "responses": _responses("the savings report", obj, 400),
            }
        },
        "/admin/sessions": {
            "get": {
                "operationId": "listSessions",
                "summary": "Sessions, newest first, paginated by cursor",
                "parameters": _query_parameters(ListQuery),
                "responses": _responses("a page of sessions", obj, 400),
            }
        },
        "/admin/sessions/{id}": {
            "get": {
                "operationId": "getSession",
                "summary": "State, summary, counters, turns, what the model asked back (with "
                "level 1's policy per tool) and the upstream's view",
                "parameters": [session_id, *_query_parameters(DetailQuery)],
                "responses": _responses("the session", obj, 400, 404),
            },
            "delete": {
                "operationId": "deleteSession",
                "summary": "Forget the session",
                "parameters": [session_id],
                "responses": _responses("deleted", obj, 404),
            },
        },
        "/admin/sessions/{id}/export": {
            "get": {
                "operationId": "exportSession",
                "summary": "The rebuilt conversation's dumps()",
                "parameters": [session_id],
                "responses": _responses("Conversation.dumps()", obj, 404, 409),
            }
        },
        "/admin/sessions/{id}/compact": {
            "post": {
                "operationId": "compactSession",
                "summary": "Manual compaction: level 1 (toolcall) or level 2 (summary)",
                "parameters": [session_id],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": CompactBody.model_json_schema()}},
                },
                "responses": _responses(
                    "ToolCallCompactResult or SummaryCompactResult", obj, 400, 404, 409
                ),
            }
        },
        "/admin/sessions/{id}/compacted/{tool_call_id}": {
            "get": {
                "operationId": "getCompactedOriginal",
                "summary": "The original content of a reclaimed tool result",
                "parameters": [
                    session_id,
                    _path_parameter("tool_call_id", "tool-call id shown in the placeholder"),
                ],
                "responses": _responses("the original", obj, 404, 409),
            }
        },
    }


def _components() -> dict[str, Any]:
    """The security scheme and the error body every route answers with."""
    return {
        "securitySchemes": {"adminKey": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["message", "type", "param", "code"],
                        "properties": {
                            "message": {"type": "string"},
                            "type": {"type": "string"},
                            "param": {"type": ["string", "null"]},
                            "code": {"type": ["string", "null"]},
                        },
                    }
                },
            }
        },
    }
