"""The `xun-proxy` command: `serve` (the default) runs the proxy; `sessions` inspects a store.

    xun-proxy [serve] [--upstream URL] [--port N] [--store URL] ...
    xun-proxy sessions ls|show|export|rm [--store URL] ...   (see proxy.admin.sessions_cli)

Flags only collect values; `proxy.settings.load_settings` merges them with the environment
and the config file and validates everything, so errors read the same whatever the source.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from proxy import __version__
from proxy.admin import sessions_cli
from proxy.settings import ConfigError, Settings, load_settings

COMMANDS = ("serve", "sessions")


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", dest="config_file", metavar="FILE", help="YAML config file")
    parser.add_argument("--store", dest="store_url", metavar="URL", help="memory://, sqlite:///…")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xun-proxy",
        description="A transparent OpenAI-compatible proxy that compacts long agent sessions.",
    )
    parser.add_argument("--version", action="version", version=f"xun-proxy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{serve,sessions}")

    serve = commands.add_parser("serve", help="run the proxy (the default command)")
    _add_config_flags(serve)
    add = serve.add_argument
    add("--upstream", dest="upstream_base_url", metavar="URL", help="upstream API base URL")
    add("--upstream-api-key", dest="upstream_api_key", metavar="KEY", help="key sent upstream")
    add(
        "--anthropic-upstream",
        dest="anthropic_base_url",
        metavar="URL",
        help="Anthropic API base URL for /v1/messages (as ANTHROPIC_BASE_URL)",
    )
    add("--host", dest="host", help="bind address (default 127.0.0.1)")
    add(
        "--allowed-host",
        dest="allowed_hosts",
        metavar="NAME",
        action="append",
        help="with --upstream-api-key: a Host name served besides loopback ones (repeatable)",
    )
    add("--port", dest="port", help="bind port (default 8484)")
    add("--token-threshold", dest="token_threshold", metavar="N", help="compact above N tokens")
    add(
        "--no-auto-compact",
        dest="auto_compact_enabled",
        action="store_const",
        const=False,
        help="pass everything through uncompacted",
    )
    add("--admin-key", dest="admin_key", metavar="KEY", help="bearer key for /admin routes")
    add("--summary-model", dest="summary_model", metavar="NAME", help="model for summaries")
    add(
        "--session-header",
        dest="session_headers",
        metavar="NAME",
        action="append",
        help="session header name, repeatable, first present wins (default X-Session-Id)",
    )
    add(
        "--tenant-header",
        dest="tenant_header",
        metavar="NAME",
        help="a header (set by a trusted gateway) whose value is the tenant instead of the "
        "credential, so rotated tokens keep their sessions (default: off)",
    )
    add("--max-body-bytes", dest="max_body_bytes", metavar="N", help="request body cap")
    add(
        "--drain-timeout",
        dest="drain_timeout",
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests get to finish (default 30)",
    )
    add("--log-level", dest="log_level", choices=["critical", "error", "warning", "info", "debug"])
    add(
        "--log-content",
        dest="log_content",
        action="store_const",
        const=True,
        help="debug: allow message content in logs",
    )

    sessions_cli.add_parser(commands, _add_config_flags)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from proxy.server import allocator, lifecycle
    from proxy.server.app import create_app
    from proxy.server.logging import configure_logging
    from proxy.turn.thinking_binder import WALKS

    fields = set(Settings.model_fields)
    overrides = {key: value for key, value in vars(args).items() if key in fields}
    settings = load_settings(overrides)
    configure_logging(settings.log_level)
    app = create_app(settings)
    # After a burst of load, give the allocators' spare memory back (proxy.server.allocator).
    allocator.tune_allocator()
    allocator.tune_collector()  # what exists now lives as long as the process
    drain: lifecycle.Drain = app.state.drain

    def release() -> None:  # the store is opened by the app's lifespan, once serving starts
        store = getattr(app.state, "store", None)
        if store is not None:
            store.release_memory()
        app.state.neutral_reuse.clear()  # conversions kept only for speed
        WALKS.clear()  # and the thinking bindings' walks (proxy.turn.thinking_binder)

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
        return _serve(args)
    except ConfigError as exc:
        print(f"xun-proxy: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # open_store's answer to a bad store URL, bad --since
        print(f"xun-proxy: {exc}", file=sys.stderr)
        return 2
