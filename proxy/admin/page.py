"""The session viewer page at /admin/, its static files, and /admin/openapi.json.

The page is plain HTML, CSS and JavaScript from `proxy/admin/web/` (no CDN: it works offline). It
renders untrusted text (model output, tool results), so it builds DOM nodes from text only,
and a Content-Security-Policy forbids inline or foreign scripts in case anything slips.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from proxy.admin.api import ADMIN_PREFIX, admin_routes
from proxy.admin.base import admin_enabled
from proxy.admin.schema import openapi

WEB_DIR = Path(__file__).resolve().parent / "web"
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


async def page(request: Request) -> Response:
    admin_enabled(request)
    return FileResponse(WEB_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)


async def page_redirect(request: Request) -> Response:
    return RedirectResponse(ADMIN_PREFIX + "/", status_code=307)


async def openapi_document(request: Request) -> Response:
    admin_enabled(request)
    return JSONResponse(openapi())


def admin_web_routes() -> list[BaseRoute]:
    """Every /admin route: the API, the page, its static files and the schema."""
    return [
        *admin_routes(),
        Route(ADMIN_PREFIX, page_redirect, methods=["GET"]),
        Route(ADMIN_PREFIX + "/", page, methods=["GET"]),
        Route(ADMIN_PREFIX + "/openapi.json", openapi_document, methods=["GET"]),
        Mount(ADMIN_PREFIX + "/static", StaticFiles(directory=WEB_DIR), name="admin-static"),
    ]
