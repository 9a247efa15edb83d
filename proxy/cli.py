"""The `xun-proxy` command: `serve` (the default) runs the proxy; `sessions` inspects a store.

    xun-proxy [serve] [--upstream URL] [--port N] [--store URL] ...
    xun-proxy sessions ls|show|export|rm [--store URL] ...   (see proxy.admin.sessions_cli)
    xun-proxy report [--since 24h] [--by model|tenant|session] ...   (proxy.admin.report_cli)

Flags only collect values; `proxy.settings.load_settings` merges them with the environment
and the config file and validates everything, so errors read the same whatever the source.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy import __version__
from proxy.admin import report_cli, sessions_cli
from proxy.compaction.windows import CAP_WINDOW_SHARE, DEFAULT_WINDOW_SHARE
from proxy.settings import (
    ConfigError,
    Settings,
    colour_allowed,
    default_store_url,
    load_settings,
)

if TYPE_CHECKING:
    from proxy.server.metrics import Metrics

COMMANDS = ("serve", "sessions", "report")


def _default(field: str) -> Any:
    """A setting's default, as `Settings` has it: the help texts quote these."""
    info = Settings.model_fields[field]
    factory = info.default_factory
    return factory() if factory is not None else info.default  # type: ignore[call-arg]


def _number(value: float) -> str:
    return f"{value:g}"


def _percent(share: float) -> str:
    return f"{share * 100:g}%%"  # argparse expands % in help texts


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", dest="config_file", metavar="FILE", help="YAML file with the config keys"
    )
    parser.add_argument(
        "--store",
        dest="store_url",
        metavar="URL",
        help="where session state lives: sqlite:///PATH.db, memory:// or redis://host:port/db "
        f"(default {default_store_url()})",
    )


def _add_serve_flags(serve: argparse.ArgumentParser) -> None:
    _add_config_flags(serve)
    add = serve.add_argument
    add(
        "--upstream",
        dest="upstream_base_url",
        metavar="URL",
        help=f"OpenAI-compatible upstream base URL (default {_default('upstream_base_url')})",
    )
    add(
        "--upstream-api-key",
        dest="upstream_api_key",
        metavar="KEY",
        help="the proxy's own key for the upstream (default: none, the client's credentials "
        "pass through)",
    )
    add(
        "--anthropic-upstream",
        dest="anthropic_base_url",
        metavar="URL",
        help="Anthropic API base URL, as ANTHROPIC_BASE_URL takes it, for /v1/messages and "
        f"requests with Anthropic's headers (default {_default('anthropic_base_url')})",
    )
    _add_server_flags(serve)


def _add_server_flags(serve: argparse.ArgumentParser) -> None:
    add = serve.add_argument
    add("--host", dest="host", help=f"bind address (default {_default('host')})")
    add(
        "--allowed-host",
        dest="allowed_hosts",
        metavar="NAME",
        action="append",
        help="with --upstream-api-key: a Host name (no port) served besides loopback ones, "
        "also by a key-less admin (repeatable, or a comma list)",
    )
    add("--port", dest="port", help=f"bind port (default {_default('port')})")
    add(
        "--workers",
        dest="workers",
        metavar="N",
        help="processes serving the port, sharing the store: an SQLite file or Redis, never "
        f"memory:// (default {_default('workers')})",
    )
    add(
        "--token-threshold",
        dest="token_threshold",
        metavar="N",
        help="compact a session past N prompt tokens (default "
        f"{_percent(DEFAULT_WINDOW_SHARE)} of the model's window when known, else "
        f"{_default('token_threshold')}; a value given is capped at "
        f"{_percent(CAP_WINDOW_SHARE)} of a known window)",
    )
    add(
        "--no-auto-compact",
        dest="auto_compact_enabled",
        action="store_const",
        const=False,
        help="send every request upstream uncompacted",
    )
    add(
        "--mode",
        dest="mode",
        choices=["compact", "shadow"],
        help="shadow: every request goes upstream exactly as the client sent it, and the proxy "
        f"records what it would have sent (default {_default('mode')})",
    )
    add(
        "--admin-key",
        dest="admin_key",
        metavar="KEY",
        help="bearer key for the /admin routes (default: none, admin answers only on a "
        "loopback bind, for loopback Host names)",
    )
    add(
        "--summary-model",
        dest="summary_model",
        metavar="NAME",
        help="model for summaries (default: the request's model)",
    )
    add(
        "--summary-upstream",
        dest="summary_upstream",
        metavar="URL",
        help="OpenAI-compatible base URL for summaries, asked in Chat Completions "
        "(default: none, summaries go where the session's requests go)",
    )
    add(
        "--summary-upstream-api-key",
        dest="summary_upstream_api_key",
        metavar="KEY",
        help="key sent to --summary-upstream (default: none)",
    )
    add(
        "--prices",
        dest="prices",
        metavar="FILE",
        help="JSON file of model prices for the savings reports, by model-name prefix "
        "(default: the built-in table)",
    )
    _add_session_flags(serve)


def _add_session_flags(serve: argparse.ArgumentParser) -> None:
    add = serve.add_argument
    add(
        "--summary-ahead",
        dest="summary_ahead",
        choices=["on", "off"],
        help="write summaries in the background before the turn that needs them (default on)",
    )
    add(
        "--adaptive-reclaim",
        dest="adaptive_reclaim",
        choices=["on", "off"],
        help="stop or slow the reclaiming of a tool's results that the model keeps asking "
        "back, per session (default on)",
    )
    add(
        "--session-header",
        dest="session_headers",
        metavar="NAME",
        action="append",
        help="session header name, repeatable or a comma list, the first present wins "
        f"(default {', '.join(_default('session_headers'))})",
    )
    add(
        "--tenant-header",
        dest="tenant_header",
        metavar="NAME",
        help="a header (set by a trusted gateway) whose value is the tenant instead of the "
        "credential, so rotated tokens keep their sessions (default: off)",
    )
    max_body = int(_default("max_body_bytes"))
    add(
        "--max-body-bytes",
        dest="max_body_bytes",
        metavar="N",
        help=f"request body cap in bytes (default {max_body}: {max_body // 2**20} MiB)",
    )
    add(
        "--drain-timeout",
        dest="drain_timeout",
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests get to finish "
        f"(default {_number(_default('drain_timeout'))})",
    )
    add(
        "--log-level",
        dest="log_level",
        choices=["critical", "error", "warning", "info", "debug"],
        help=f"(default {_default('log_level')})",
    )
    add(
        "--log-content",
        dest="log_content",
        action="store_const",
        const=True,
        help="debug: allow message content in logs (default: never)",
    )
    add(
        "--log-format",
        dest="log_format",
        choices=["console", "json"],
        help="console: one readable line a request; json: one JSON object a line "
        "(default: console when stderr is a terminal, else json)",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xun-proxy",
        description="A transparent OpenAI-compatible proxy that compacts long agent sessions.",
    )
    parser.add_argument("--version", action="version", version=f"xun-proxy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{serve,sessions,report}")

    serve = commands.add_parser("serve", help="run the proxy (the default command)")
    _add_serve_flags(serve)
    sessions_cli.add_parser(commands, _add_config_flags)
    report_cli.add_parser(commands, _add_config_flags)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from proxy.server.logging import configure_logging

    fields = set(Settings.model_fields)
    overrides = {key: value for key, value in vars(args).items() if key in fields}
    settings = load_settings(overrides)
    workers = settings.workers > 1
    fmt, colour = settings.log_format, colour_allowed()
    configure_logging(settings.log_level, fmt=fmt, colour=colour, pid=workers)
    if workers:
        from proxy.server import workers as processes

        # N processes on one socket bound here (proxy.server.workers); each runs `_run`.
        return processes.run(settings, functools.partial(_run, settings))
    return _run(settings)


def _run(settings: Settings, *, metrics: Metrics | None = None, **serving: Any) -> int:
    """Serve one process: the proxy alone, or one of `--workers` (`metrics` and `serving`,
    the socket and server class, are then the worker's)."""
    from proxy import artifacts
    from proxy.server import allocator, lifecycle
    from proxy.server.app import create_app
    from proxy.turn import asked_back_tally
    from proxy.turn.thinking_binder import WALKS

    app = create_app(settings, worker_metrics=metrics)
    # After a burst of load, give the allocators' spare memory back (proxy.server.allocator).
    allocator.tune_allocator()
    allocator.tune_collector()  # what exists now lives as long as the process
    drain: lifecycle.Drain = app.state.drain

    def release() -> None:  # the store is opened by the app's lifespan, once serving starts
        store = getattr(app.state, "store", None)
        if store is not None:
            store.release_memory()
        app.state.neutral_reuse.clear()  # conversions kept only for speed
        app.state.body_reuse.shrink()  # the parsed histories: the last few sessions' only
        WALKS.clear()  # and the thinking bindings' walks (proxy.turn.thinking_binder)
        artifacts.forget()  # and the trail's remembered scans
        asked_back_tally.SIGNATURES.clear()  # and the reclaimed calls' signatures

    reclaimer = allocator.IdleReclaimer(
        lambda: (drain.in_flight, drain.admitted),
        action=lambda: allocator.reclaim(release),
        on_reclaim=app.state.metrics.memory_reclaim_seconds.observe,
    )
    # SIGTERM drains (proxy.server.lifecycle): /readyz and new requests answer 503, requests in
    # flight get `drain_timeout` seconds to finish, then the process exits with status 0.
    return lifecycle.serve(
        app,
        drain=drain,
        drain_timeout=settings.drain_timeout,
        reclaimer=reclaimer,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        proxy_headers=False,
        access_log=False,  # RequestLogMiddleware writes one JSON line per request
        log_config=None,  # keep the JSON logging configured above
        log_level=settings.log_level,
        **serving,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] not in (*COMMANDS, "-h", "--help", "--version"):
        args_list.insert(0, "serve")  # `xun-proxy --port 9000` means `xun-proxy serve ...`
    parser = _build_parser()
    args = parser.parse_args(args_list)
    try:
        if args.command == "sessions":
            return asyncio.run(sessions_cli.run(args, sys.stdout))
        if args.command == "report":
            return asyncio.run(report_cli.run(args, sys.stdout))
        return _serve(args)
    except ConfigError as exc:
        print(f"xun-proxy: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # open_store's answer to a bad store URL, bad --since
        print(f"xun-proxy: {exc}", file=sys.stderr)
        return 2
