"""The `xun-proxy` command: `serve` (the default) runs the proxy; `sessions` inspects a store.

    xun-proxy [serve] [--upstream URL] [--port N] [--store URL] ...
    xun-proxy sessions ls|show|export|rm [--store URL] ...

Flags only collect values; `proxy.settings.load_settings` merges them with the environment
and the config file and validates everything, so errors read the same whatever the source.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from proxy import __version__
from proxy.settings import ConfigError, Settings, load_settings
from proxy.store import SessionInfo, Store, StoredSession, open_store

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
    add("--host", dest="host", help="bind address (default 127.0.0.1)")
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

    sessions = commands.add_parser("sessions", help="list, show, export or delete sessions")
    actions = sessions.add_subparsers(dest="action", metavar="{ls,show,export,rm}", required=True)
    ls = actions.add_parser("ls", help="list sessions, newest first")
    _add_config_flags(ls)
    ls.add_argument("--tenant", help="only this tenant's sessions")
    ls.add_argument("--since", help="only sessions updated after (ISO time or epoch seconds)")
    ls.add_argument("--limit", type=int, default=100, help="rows per page (default 100)")
    ls.add_argument("--cursor", help="continue from a previous page")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    show = actions.add_parser("show", help="a session's metadata and state as JSON")
    _add_config_flags(show)
    show.add_argument("id")
    export = actions.add_parser("export", help="write a session's stored state")
    _add_config_flags(export)
    export.add_argument("id")
    export.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")
    rm = actions.add_parser("rm", help="delete sessions")
    _add_config_flags(rm)
    rm.add_argument("ids", nargs="+", metavar="id")
    return parser


def _serve(args: argparse.Namespace) -> int:
    from proxy import lifecycle
    from proxy.app import create_app
    from proxy.logging import configure_logging

    fields = set(Settings.model_fields)
    overrides = {key: value for key, value in vars(args).items() if key in fields}
    settings = load_settings(overrides)
    configure_logging(settings.log_level)
    app = create_app(settings)
    # SIGTERM drains (proxy.lifecycle): /readyz and new requests answer 503, requests in
    # flight get `drain_timeout` seconds to finish, then the process exits with status 0.
    return lifecycle.serve(
        app,
        drain=app.state.drain,
        drain_timeout=settings.drain_timeout,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        proxy_headers=False,
        access_log=False,  # RequestLogMiddleware writes one JSON line per request
        log_config=None,  # keep the JSON logging configured above
        log_level=settings.log_level,
    )


def _since(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        stamp = datetime.fromisoformat(value)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def _info_row(info: SessionInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "tenant": info.key.tenant,
        "session": info.key.session,
        "version": info.version,
        "updated_at": _iso(info.updated_at),
        "size": info.size,
        "meta": info.meta,
    }


def _print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    columns = ("id", "tenant", "session", "messages", "total_tokens", "updated_at", "size")
    table: list[tuple[str, ...]] = [columns]
    for row in rows:
        values = [row[c] if c in row else row["meta"].get(c) for c in columns]
        table.append(tuple("" if value is None else str(value) for value in values))
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        out.write("\n")


async def _get(store: Store, session_id: str) -> StoredSession:
    found = await store.get_by_id(session_id)
    if found is None:
        raise LookupError(session_id)
    return found


async def _sessions(args: argparse.Namespace, store: Store, out: TextIO) -> int:
    if args.action == "ls":
        infos, cursor = await store.list(
            tenant=args.tenant,
            updated_after=_since(args.since),
            limit=args.limit,
            cursor=args.cursor,
        )
        rows = [_info_row(info) for info in infos]
        if args.json:
            for row in rows:
                out.write(orjson.dumps(row).decode() + "\n")
        else:
            _print_table(rows, out)
        if cursor is not None:
            print(f"more: --cursor {cursor}", file=sys.stderr)
        return 0
    if args.action == "show":
        stored = await _get(store, args.id)
        try:
            state: Any = orjson.loads(stored.data)
        except orjson.JSONDecodeError:
            state = stored.data.decode("utf-8", "replace")
        detail = {
            "id": stored.key.id,
            "tenant": stored.key.tenant,
            "session": stored.key.session,
            "version": stored.version,
            "updated_at": _iso(stored.updated_at),
            "meta": stored.meta,
            "state": state,
        }
        out.write(orjson.dumps(detail, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if args.action == "export":
        stored = await _get(store, args.id)
        if args.output is None:
            out.write(stored.data.decode("utf-8", "replace"))
            out.write("\n")
        else:
            args.output.write_bytes(stored.data)
        return 0
    missing = 0
    for session_id in args.ids:
        found = await store.get_by_id(session_id)
        if found is None or not await store.delete(found.key):
            print(f"xun-proxy: no session {session_id}", file=sys.stderr)
            missing += 1
        else:
            out.write(f"deleted {session_id}\n")
    return 1 if missing else 0


async def _run_sessions(args: argparse.Namespace, out: TextIO) -> int:
    overrides = {"store_url": args.store_url, "config_file": args.config_file}
    settings = load_settings(overrides)
    store = open_store(
        settings.store_url,
        max_session_bytes=settings.session_max_bytes,
        ttl_seconds=settings.session_ttl_seconds,
    )
    try:
        return await _sessions(args, store, out)
    except LookupError as exc:
        print(f"xun-proxy: no session {exc.args[0]}", file=sys.stderr)
        return 1
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] not in (*COMMANDS, "-h", "--help", "--version"):
        args_list.insert(0, "serve")  # `xun-proxy --port 9000` means `xun-proxy serve ...`
    parser = _build_parser()
    args = parser.parse_args(args_list)
    try:
        if args.command == "sessions":
            return asyncio.run(_run_sessions(args, sys.stdout))
        return _serve(args)
    except ConfigError as exc:
        print(f"xun-proxy: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # open_store's answer to a bad store URL, bad --since
        print(f"xun-proxy: {exc}", file=sys.stderr)
        return 2
