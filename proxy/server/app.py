"""The ASGI application: routes, error handlers, the access-log middleware and the lifespan.

`create_app` builds everything from a `Settings`; the shared upstream client and the store live
in the lifespan (`app.state.upstream`, `app.state.store`), never in module globals.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from proxy.admin.page import admin_web_routes
from proxy.compact import AutoCompactor, CompactorAbstract
from proxy.compaction.prices import Prices
from proxy.errors import (
    ProxyError,
    error_payload,
    handle_http_exception,
    handle_proxy_error,
    handle_unexpected,
)
from proxy.server.forward import anthropic_forward_endpoint, forward_endpoint
from proxy.server.guard import GuardMiddleware
from proxy.server.lifecycle import Drain, DrainMiddleware, is_draining
from proxy.server.logging import RequestLogMiddleware
from proxy.server.metrics import Metrics, MetricsMiddleware, metrics_endpoint
from proxy.server.model_routes import chat_completions, messages, responses
from proxy.server.origin import OriginGuardMiddleware
from proxy.setting_values import BUILTIN_COMPACTORS
from proxy.settings import ConfigError, Settings
from proxy.store import CachedStore, Store, open_store
from proxy.store.cache import with_cache
from proxy.turn.body_reuse import BodyReuse
from proxy.turn.persist import SessionWriter
from proxy.turn.shadow_work import ShadowTasks
from proxy.turn.summary_ahead_limits import AheadTasks, share_of
from proxy.turn.summary_upstream import open_summary_upstream
from proxy.upstream.client import Pool, Upstream
from proxy.wire.neutral_reuse import NeutralReuse

FORWARD_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_COMPACTOR_FIELDS = (
    "toolcall_keep_max",
    "summary_keep_max",
    "tail_max_tokens",
    "escalation_rounds",
    "max_retries",
)


DEFAULT_COMPACTOR = "cache-aware"


def load_compactor(settings: Settings) -> CompactorAbstract:
    """The compaction strategy: `auto_compact.compactor` by import path, else `AutoCompactor`.

    The configured keep windows and rounds are passed to a custom class when its constructor
    takes them.
    """
    fields = {name: getattr(settings, name) for name in _COMPACTOR_FIELDS}
    path = BUILTIN_COMPACTORS.get(settings.compactor or DEFAULT_COMPACTOR, settings.compactor)
    if path is None or path == BUILTIN_COMPACTORS["seed"]:
        seed_fields = {f.name for f in dataclasses.fields(AutoCompactor)}
        return AutoCompactor(**{k: v for k, v in fields.items() if k in seed_fields})
    module_name, _, attr_path = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            target = getattr(target, attr)
    except (ImportError, AttributeError) as exc:
        message = f"auto_compact.compactor: cannot import {settings.compactor}: {exc}"
        raise ConfigError([message]) from exc
    if not (isinstance(target, type) and issubclass(target, CompactorAbstract)):
        message = f"auto_compact.compactor: {settings.compactor} is not a CompactorAbstract"
        raise ConfigError([message])
    params = inspect.signature(target).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {name: value for name, value in fields.items() if takes_any or name in params}
    instance: CompactorAbstract = target(**kwargs)
    return instance


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when not draining, the store answers its ping and its writes go through."""
    state = request.app.state
    if is_draining(state):
        body = error_payload("The proxy is shutting down.", "server_error", "draining")
        return JSONResponse({"status": "draining", **body}, status_code=503)
    store: Store | None = getattr(state, "store", None)
    where = str(getattr(store, "where", "")) or type(store).__name__
    if store is None or not await store.ping():
        message = f"The session store ({where}) is unreachable."
        body = error_payload(message, "server_error", "store_down")
        body["store_url"] = where
        return JSONResponse({"status": "not_ready", "store": "unreachable", **body}, 503)
    verbose = "verbose" in request.query_params
    write_failure = getattr(store, "write_failure", None)  # a store whose writes can fail
    failure = await write_failure() if write_failure is not None else None
    if failure is not None:  # a full disk: the store answers, but keeps nothing
        message = f"Writes to the session store ({where}) fail; requests pass uncompacted."
        body = error_payload(message, "server_error", "store_writes_failing")
        body["store_url"] = where
        if verbose:
            body["reason"] = failure
        return JSONResponse({"status": "not_ready", "store": "writes_failing", **body}, 503)
    ready: dict[str, Any] = {"status": "ready", "store": "ok"}
    if verbose:  # /readyz?verbose: which store, and the cache
        ready["store_url"] = where
        if isinstance(store, CachedStore):
            ready["cache"] = store.stats().to_dict()
        reuse: BodyReuse | None = getattr(state, "body_reuse", None)
        if reuse is not None:
            ready["body_reuse"] = reuse.stats()
    return JSONResponse(ready)


def _open_store(settings: Settings) -> Store:
    """The configured store, behind the read cache."""
    opened = open_store(
        settings.store_url,
        max_session_bytes=settings.session_max_bytes,
        ttl_seconds=settings.session_ttl_seconds,
    )
    return with_cache(
        opened,
        settings.store_url,
        max_entries=settings.store_cache_entries,
        max_bytes=settings.store_cache_bytes,
    )


def _routes() -> list[BaseRoute]:
    """The model routes first: starlette tries routes in order, and they carry the traffic."""
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *admin_web_routes(),
        Route("/v1/messages/{path:path}", anthropic_forward_endpoint, methods=FORWARD_METHODS),
        Route("/v1/{path:path}", forward_endpoint, methods=FORWARD_METHODS),
    ]


def _middleware(settings: Settings, metrics: Metrics, drain: Drain) -> list[Middleware]:
    """Outermost first: the access log, metrics, the drain gate, the guard, the origin rules."""
    middleware = [
        Middleware(RequestLogMiddleware, include_exception_text=settings.log_content),
        Middleware(MetricsMiddleware, metrics=metrics),
        Middleware(DrainMiddleware, drain=drain),
        Middleware(
            GuardMiddleware,
            body_timeout=settings.body_timeout,
            send_timeout=settings.send_timeout,
        ),
    ]
    if settings.upstream_api_key is not None:  # the proxy spends a key of its own
        middleware.append(Middleware(OriginGuardMiddleware, allowed_hosts=settings.allowed_hosts))
    return middleware


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    pool: Pool | None = None,
    worker_metrics: Metrics | None = None,
) -> Starlette:
    """Build the proxy app. An injected `store` is used as is and not closed on shutdown;
    `pool` replaces the upstream connection pool (tests); `worker_metrics` are a worker's, whose
    values every worker shares (proxy.server.workers)."""
    compactor = load_compactor(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        upstream = Upstream(settings, pool=pool)
        anthropic = Upstream(settings, base_url=settings.anthropic_base_url + "/v1")
        summaries = open_summary_upstream(settings)  # None: summaries go where the turns go
        owned = store is None
        active = store
        if active is None:
            active = _open_store(settings)
        app.state.upstream = upstream
        app.state.anthropic_upstream = anthropic
        app.state.summary_upstream = summaries
        app.state.store = active
        app.state.writer = writer = SessionWriter(on_store_error=metrics.store_errors.inc)
        share = share_of(settings.max_upstream_connections, settings.summary_ahead_connections)
        app.state.ahead = ahead = AheadTasks(count=metrics.count_ahead, share=share)
        app.state.shadow = shadow = ShadowTasks(abandoned=metrics.shadow_abandoned.inc)
        try:
            yield
        finally:
            await ahead.close()  # summaries in flight are lost; only finished ones are stored
            await shadow.close()
            await writer.idle()  # the last turns' saves land before the store closes
            await upstream.aclose()
            await anthropic.aclose()
            if summaries is not None:
                await summaries.aclose()
            if owned:
                await active.close()

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        ProxyError: handle_proxy_error,
        HTTPException: handle_http_exception,
        Exception: handle_unexpected,
    }
    metrics = Metrics() if worker_metrics is None else worker_metrics
    drain = Drain()
    app = Starlette(
        routes=_routes(),
        middleware=_middleware(settings, metrics, drain),
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.compactor = compactor
    app.state.neutral_reuse = NeutralReuse()
    app.state.body_reuse = BodyReuse()  # shrunk when idle, not emptied: agents pause
    app.state.drain = drain
    app.state.metrics = metrics
    app.state.prices = Prices(settings.prices)  # the savings' money (proxy.compaction.prices)
    app.state.clock = time.time  # when a request came (tests set another clock)
    return app
