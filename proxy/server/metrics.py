"""Prometheus metrics: one registry per app, fed at the end of each request from its log fields.

`Metrics` owns a `CollectorRegistry` (no module globals, so two apps in one process never share
counters). `MetricsMiddleware` is pure ASGI: when a request is over it reads the facts routes
put in `request.state.log_fields` (compaction, tokens, extract calls, store errors, upstream
time, the wire: chat, responses or messages), what the model asked back by tool
(`request.state.lookback`, kept out of the log line) and the matched route's path template.
Labels never carry a session id, a tenant, a key or a raw path: only route templates,
statuses and small fixed vocabularies (tool names: capped and folded,
`proxy.server.asked_back_metrics`; models: `proxy.server.savings_metrics`).

Under `--workers N` (proxy.server.workers) every worker's `Metrics(shared_dir=...)` keeps its
values in files of prometheus_client's multiprocess mode, in a directory the main process
creates and removes, and `/metrics` on any worker renders the sum over all of them: counters
and histograms add up, the active-sessions gauge is the latest count taken, and
`xun_worker_processes` is the number of workers alive.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.server.asked_back_metrics import LookBackMetrics
from proxy.server.savings_metrics import SavingsMetrics
from proxy.store import Store, StoreError

__all__ = ["CONTENT_TYPE", "Metrics", "MetricsMiddleware", "metrics_endpoint"]

# The classic text format every Prometheus (2.x and 3.x) reads; our names are plain ASCII.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED_ROUTE = "unmatched"
# Seconds between two counts of the store: a scrape every few seconds stays one cheap query.
ACTIVE_SESSIONS_TTL = 10.0
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_RECLAIM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_TRAIL_BUCKETS = (0.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0)
_TOKEN_BUCKETS = tuple(float(2**n * 1000) for n in range(12))  # 1k .. 2M tokens
_LABEL_VALUE = re.compile(r"^[a-z_]{1,40}$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# The APIs the model routes speak; "none" for every other route (admin, health, metrics).
WIRES = frozenset({"chat", "responses", "messages"})
NO_WIRE = "none"


def _label(value: Any, default: str = "other") -> str:
    """A label value from a small vocabulary; anything else folds into `default`."""
    text = str(value).lower() if value is not None else ""
    return text if _LABEL_VALUE.match(text) else default


def wire_label(value: Any) -> str:
    """A request's wire as a label: one of `WIRES`, else "none"."""
    return value if isinstance(value, str) and value in WIRES else NO_WIRE


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def share_values(path: str) -> None:
    """Keep the values of metrics made from now on in files under `path` (prometheus_client's
    multiprocess mode), for the process's worker. The library reads the directory from its
    environment variable, and picks the kind of value it stores when it is imported, so both
    are set here, in the worker, before its `Metrics` is made."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


def _ahead_counter(registry: CollectorRegistry) -> Counter:
    return Counter(
        "xun_summary_ahead",
        "Summaries written ahead of the turn that needs them, by outcome: started, ready, "
        "used, unused (stale or superseded, never sent), waiting (a turn that would have "
        "summarised went up without), busy (another request or replica writes it), failed, "
        "deferred (the share of upstream connections was full), backoff (a try skipped after "
        "failures).",
        ["outcome"],
        registry=registry,
    )


class Metrics:
    """Every metric of one proxy app, in its own registry; with `shared_dir`, the values of
    every worker's (see the module doc), after `share_values(shared_dir)`."""

    def __init__(self, *, shared_dir: str | None = None) -> None:
        self.shared_dir = shared_dir
        # Each metric's child by its label values (`_child`, 3 a request), made once.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter(
            "xun_requests",
            "HTTP requests by route template, status and wire (chat, responses, messages; "
            "none for routes that are no model API).",
            ["route", "method", "status", "wire"],
            registry=reg,
        )
        self.upstream_seconds = Histogram(
            "xun_upstream_seconds",
            "Time spent waiting on the upstream API per request.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.overhead_seconds = Histogram(
            "xun_proxy_overhead_seconds",
            "Time spent in the proxy per request: total time minus upstream time.",
            ["route"],
            buckets=_OVERHEAD_BUCKETS,
            registry=reg,
        )
        self.compactions = Counter(
            "xun_compactions",
            "Compactions by level, outcome, trigger (auto, manual, or shadow: projected only) "
            "and the session's wire.",
            ["level", "outcome", "trigger", "wire"],
            registry=reg,
        )
        self.tokens_before = Histogram(
            "xun_compaction_tokens_before",
            "total_tokens of a conversation before compaction.",
            buckets=_TOKEN_BUCKETS,
            registry=reg,
        )
        self.tokens_after = Histogram(
            "xun_compaction_tokens_after",
            "Estimated total_tokens after compaction.",
            buckets=_TOKEN_BUCKETS,
            registry=reg,
        )
        self.trail_entries = Histogram(
            "xun_trail_entries",
            "Artifact trail entries kept with a new summary, by kind.",
            ["kind"],
            buckets=_TRAIL_BUCKETS,
            registry=reg,
        )
        self.extract_calls = Counter(
            "xun_extract_calls",
            "extract_compacted_tool_result calls answered by the proxy.",
            registry=reg,
        )
        self.summary_calls = Counter(
            "xun_summary_calls", "Upstream summary requests made by the proxy.", registry=reg
        )
        self.store_errors = Counter(
            "xun_store_errors", "Session store operations that failed.", registry=reg
        )
        self._background_metrics(reg)
        self.degraded = Counter(
            "xun_degraded_requests",
            "Session requests sent upstream uncompacted, by reason.",
            ["reason"],
            registry=reg,
        )
        self._savings_metrics(reg)
        self.memory_reclaim_seconds = Histogram(
            "xun_memory_reclaim_seconds",
            "Idle memory reclaims after traffic (full GC and malloc_trim), by duration.",
            buckets=_RECLAIM_BUCKETS,
            registry=reg,
        )
        self._add_gauges(reg)
        self._counted_at = float("-inf")

    def _background_metrics(self, reg: CollectorRegistry) -> None:
        """The work the proxy does beside the requests: summaries ahead, shadow turns."""
        self.summary_ahead = _ahead_counter(reg)
        self.shadow_abandoned = Counter(
            "xun_shadow_abandoned",
            "Shadow turns abandoned past their time budget (the request only passed through).",
            registry=reg,
        )

    def _add_gauges(self, reg: CollectorRegistry) -> None:
        # How each sums over workers: the latest count taken, and one per live worker.
        self.active_sessions = Gauge(
            "xun_active_sessions",
            "Sessions in the store (counted at most every 10 s).",
            multiprocess_mode="livemostrecent",
            registry=reg,
        )
        self.worker_processes = Gauge(
            "xun_worker_processes",
            "Worker processes serving the port and alive (--workers; 1 without).",
            multiprocess_mode="livesum",
            registry=reg,
        )
        self.worker_processes.set(1)

    def _savings_metrics(self, reg: CollectorRegistry) -> None:
        # What the models asked back of what compaction took, by tool.
        self.lookback = LookBackMetrics(reg)
        # Savings by model, in prompt tokens and money (proxy.server.savings_metrics).
        self.savings = SavingsMetrics(reg)

    # -- feeding ------------------------------------------------------------------------
    def _child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, the labels in the metric's order, kept once made."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def observe_request(
        self,
        *,
        route: str,
        method: str,
        status: int,
        seconds: float,
        fields: Mapping[str, Any],
    ) -> None:
        """Record one finished request and the facts its route reported."""
        method = method if method in _METHODS else "OTHER"
        wire = wire_label(fields.get("wire"))
        self._child(self.requests, route, method, str(status), wire).inc()
        upstream_ms = _number(fields.get("upstream_ms"))
        if upstream_ms is not None:
            self._child(self.upstream_seconds, route).observe(upstream_ms / 1000)
        # Routes time every wait on the upstream, streamed bodies included, so the rest of
        # the request's time is the proxy's own.
        overhead = max(0.0, seconds - (upstream_ms or 0.0) / 1000)
        self._child(self.overhead_seconds, route).observe(overhead)
        self._observe_session_facts(fields)

    def _observe_session_facts(self, fields: Mapping[str, Any]) -> None:
        compaction = fields.get("compaction")
        wire = wire_label(fields.get("wire"))
        if compaction in ("toolcall", "summary"):
            self.observe_compaction(
                str(compaction),
                "success",
                "shadow" if fields.get("shadow") else "auto",  # shadow: only projected
                wire=wire,
                tokens_before=_number(fields.get("tokens_before")),
                tokens_after=_number(fields.get("tokens_after")),
            )
        elif compaction == "failed":
            self.observe_compaction("unknown", "error", "auto", wire=wire)
        for name, counter in (
            ("extract_calls", self.extract_calls),
            ("summary_calls", self.summary_calls),
            ("store_errors", self.store_errors),
        ):
            count = _number(fields.get(name))
            if count:
                counter.inc(count)
        trail = fields.get("trail_entries")  # {kind: count}, reported with a new summary
        if isinstance(trail, Mapping):
            for kind, count in trail.items():
                value = _number(count)
                if value is not None:
                    self.trail_entries.labels(kind=_label(kind)).observe(value)
        degraded = fields.get("degraded")
        if degraded:
            self.degraded.labels(reason=_label(degraded)).inc()
        saved = fields.get("savings")
        if isinstance(saved, Mapping) and not saved.get("shadow"):
            self.savings.observe(saved)

    def count_ahead(self, outcome: str) -> None:
        """One event of a summary written ahead (`proxy.turn.summary_ahead_limits.AheadTasks`)."""
        self.summary_ahead.labels(outcome=_label(outcome)).inc()

    def observe_compaction(
        self,
        level: str,
        outcome: str,
        trigger: str,
        *,
        wire: str = "chat",
        tokens_before: float | None = None,
        tokens_after: float | None = None,
    ) -> None:
        self.compactions.labels(
            level=_label(level),
            outcome=_label(outcome),
            trigger=_label(trigger),
            wire=wire_label(wire),
        ).inc()
        if tokens_before is not None:
            self.tokens_before.observe(tokens_before)
        if tokens_after is not None:
            self.tokens_after.observe(tokens_after)

    # -- scraping -----------------------------------------------------------------------
    async def sample_store(self, store: Store | None, *, now: float | None = None) -> None:
        """Refresh the active-sessions gauge, at most once per `ACTIVE_SESSIONS_TTL`."""
        now = time.monotonic() if now is None else now
        if store is None or now - self._counted_at < ACTIVE_SESSIONS_TTL:
            return
        self._counted_at = now
        try:
            self.active_sessions.set(await store.count())
        except StoreError:
            self.store_errors.inc()

    def render(self) -> bytes:
        if self.shared_dir is None:
            return generate_latest(self.registry)
        every_worker = CollectorRegistry()
        MultiProcessCollector(every_worker, path=self.shared_dir)  # type: ignore[no-untyped-call]
        return generate_latest(every_worker)


async def metrics_endpoint(request: Request) -> Response:
    """GET /metrics: the Prometheus text exposition format."""
    metrics: Metrics = request.app.state.metrics
    await metrics.sample_store(getattr(request.app.state, "store", None))
    return Response(metrics.render(), media_type=CONTENT_TYPE)


def route_label(scope: Scope) -> str:
    """The matched route's path template (`/admin/sessions/{id}`), never the raw path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED_ROUTE


class MetricsMiddleware:
    """Pure ASGI: time each HTTP request and hand its outcome to `Metrics`."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app raises before answering

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            # Read at the end: a route may have replaced the dict during the request.
            fields = scope.get("state", {}).get("log_fields") or {}
            self.metrics.lookback.observe(scope.get("state", {}).get("lookback"))
            self.metrics.observe_request(
                route=route_label(scope),
                method=scope["method"],
                status=status,
                seconds=time.perf_counter() - started,
                fields=fields,
            )
