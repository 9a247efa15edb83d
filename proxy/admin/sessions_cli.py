"""`xun-proxy sessions ls|show|export|rm`: inspect, export and delete sessions in any store.

    xun-proxy sessions ls [--tenant T] [--since TIME] [--older-than AGE] [--all] [--json]
    xun-proxy sessions show ID
    xun-proxy sessions export ID [-o FILE]
    xun-proxy sessions export --all [--tenant T] [--since TIME] [--older-than AGE] [-o FILE]
    xun-proxy sessions rm ID... | rm --all --yes [filters] | rm --older-than AGE [filters]

The store comes from `--store URL` (or `XUN_STORE`, or the config file), so the same command
works on SQLite, Redis or any other store URL. TIME is an ISO 8601 time or epoch seconds; AGE
is a number with an optional unit (`90s`, `45m`, `12h`, `30d`, `2w`; seconds without one).
Bulk export writes one JSON object per line. Exit status: 0, 1 when a named session is
missing or the store fails, 2 for bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from proxy.admin.times import parse_age, parse_time
from proxy.session.identity import session_header
from proxy.session.turn_log import TurnLog
from proxy.settings import load_settings
from proxy.store import SessionInfo, Store, StoredSession, StoreError, open_store
from proxy.store.base import encode_cursor

PAGE = 500


def add_parser(commands: Any, add_config_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `sessions` and its actions to the CLI's subcommands."""
    sessions = commands.add_parser("sessions", help="list, show, export or delete sessions")
    actions = sessions.add_subparsers(dest="action", metavar="{ls,show,export,rm}", required=True)

    def filters(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's sessions")
        since = "only sessions updated after TIME (ISO or epoch)"
        parser.add_argument("--since", metavar="TIME", help=since)
        parser.add_argument("--older-than", metavar="AGE", help="only sessions idle for AGE")

    ls = actions.add_parser("ls", help="list sessions, newest first")
    add_config_flags(ls)
    filters(ls)
    ls.add_argument("--limit", type=int, default=100, help="rows per page (default 100)")
    ls.add_argument("--cursor", help="continue from a previous page")
    ls.add_argument("--all", action="store_true", help="every page, not just the first")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")

    show = actions.add_parser("show", help="a session's metadata and state as JSON")
    add_config_flags(show)
    show.add_argument("id")

    export = actions.add_parser("export", help="write a session's stored state (or all)")
    add_config_flags(export)
    export.add_argument("id", nargs="?", help="the session (or --all)")
    export.add_argument("--all", action="store_true", help="every session matching the filters")
    filters(export)
    export.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")

    rm = actions.add_parser("rm", help="delete sessions")
    add_config_flags(rm)
    rm.add_argument("ids", nargs="*", metavar="id")
    rm.add_argument("--all", action="store_true", help="every session matching the filters")
    filters(rm)
    rm.add_argument("--yes", action="store_true", help="confirm --all")
    rm.add_argument("--dry-run", action="store_true", help="list what would be deleted")


# The widest a table cell gets: an id of any length leaves the table readable.
CELL_CHARS = 40


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def _info_row(info: SessionInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "tenant": info.key.tenant,
        "session": session_header(info.key.session),
        "wire": info.meta.get("wire") or "chat",  # saved before the wire was noted: chat
        "version": info.version,
        "updated_at": _iso(info.updated_at),
        "size": info.size,
        "meta": info.meta,
    }


def _state(data: bytes) -> tuple[str, Any]:
    """The stored state for JSON output: parsed when it is JSON, else base64."""
    try:
        return "state", orjson.loads(data)
    except orjson.JSONDecodeError:
        return "data_base64", base64.b64encode(data).decode("ascii")


def _cell(value: Any) -> str:
    """A table cell: control characters shown as `?` (a newline in a session id must not
    break the row), cut to `CELL_CHARS` with an ellipsis (`--json` keeps the whole value)."""
    text = "" if value is None else str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    columns = ("id", "tenant", "session", "wire", "messages", "total_tokens", "updated_at", "size")
    table: list[tuple[str, ...]] = [columns]
    for row in rows:
        values = [row[c] if c in row else row["meta"].get(c) for c in columns]
        table.append(tuple(_cell(value) for value in values))
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        out.write("\n")


class Selection:
    """The sessions the filters pick: tenant, updated after `since`, idle for `older_than`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.tenant: str | None = args.tenant
        self.since = None if args.since is None else parse_time(args.since)
        self.before = None if args.older_than is None else time.time() - parse_age(args.older_than)

    def start(self, cursor: str | None) -> str | None:
        """A listing starts at the cursor, or just below the --older-than cutoff."""
        if cursor is None and self.before is not None:
            return encode_cursor(self.before, "")  # keyset: rows with updated_at < before
        return cursor

    async def page(
        self, store: Store, limit: int, cursor: str | None
    ) -> tuple[list[SessionInfo], str | None]:
        if self.since is not None and self.before is not None and self.since >= self.before:
            return [], None
        return await store.list(
            tenant=self.tenant, updated_after=self.since, limit=limit, cursor=self.start(cursor)
        )

    async def every(self, store: Store) -> AsyncIterator[list[SessionInfo]]:
        cursor: str | None = None
        while True:
            infos, cursor = await self.page(store, PAGE, cursor)
            if infos:
                yield infos
            if cursor is None:
                return


async def _get(store: Store, session_id: str) -> StoredSession:
    found = await store.get_by_id(session_id)
    if found is None:
        raise LookupError(session_id)
    return found


async def _ls(args: argparse.Namespace, store: Store, out: TextIO) -> int:
    select = Selection(args)
    if args.all:
        infos = [info async for page in select.every(store) for info in page]
        cursor = None
    else:
        infos, cursor = await select.page(store, args.limit, args.cursor)
    rows = [_info_row(info) for info in infos]
    if args.json:
        for row in rows:
            out.write(orjson.dumps(row).decode() + "\n")
    else:
        _print_table(rows, out)
    if cursor is not None:
        print(f"more: --cursor {cursor}", file=sys.stderr)
    return 0


async def _show(args: argparse.Namespace, store: Store, out: TextIO) -> int:
    stored = await _get(store, args.id)
    try:
        state: Any = orjson.loads(stored.data)
    except orjson.JSONDecodeError:
        state = stored.data.decode("utf-8", "replace")
    if isinstance(state, dict) and isinstance(state.get("turn_log"), str):
        state["turns"] = TurnLog(state.pop("turn_log")).records()  # readable, one per turn
    detail = {
        "id": stored.key.id,
        "tenant": stored.key.tenant,
        "session": session_header(stored.key.session),
        "wire": (state.get("wire") if isinstance(state, dict) else None) or "chat",
        "version": stored.version,
        "updated_at": _iso(stored.updated_at),
        "meta": stored.meta,
        "state": state,
    }
    if stored.damaged:  # its metadata cannot be read: left out of listings
        detail["damaged"] = stored.damaged
    out.write(orjson.dumps(detail, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


async def _export(args: argparse.Namespace, store: Store, out: TextIO) -> int:
    if args.all == (args.id is not None):
        raise ValueError("export takes a session id or --all")
    if args.id is not None:
        stored = await _get(store, args.id)
        if args.output is None:
            out.write(stored.data.decode("utf-8", "replace"))
            out.write("\n")
        else:
            args.output.write_bytes(stored.data)
        return 0
    target = out if args.output is None else args.output.open("w", encoding="utf-8")
    count = 0
    try:
        async for page in Selection(args).every(store):
            for info in page:
                found = await store.get_by_id(info.id)
                if found is None:  # deleted since it was listed
                    continue
                row = _info_row(info)
                row.update(version=found.version, updated_at=_iso(found.updated_at))
                name, value = _state(found.data)
                row[name] = value
                target.write(orjson.dumps(row).decode() + "\n")
                count += 1
    finally:
        if target is not out:
            target.close()
    print(f"xun-proxy: exported {count} sessions", file=sys.stderr)
    return 0


async def _rm(args: argparse.Namespace, store: Store, out: TextIO) -> int:
    bulk = args.all or args.older_than is not None
    if bulk == bool(args.ids):
        raise ValueError("rm takes session ids, or --all --yes / --older-than AGE")
    if not bulk:
        missing = 0
        for session_id in args.ids:
            found = await store.get_by_id(session_id)
            if found is None or not await store.delete(found.key):
                print(f"xun-proxy: no session {session_id}", file=sys.stderr)
                missing += 1
            else:
                out.write(f"deleted {session_id}\n")
        return 1 if missing else 0
    if args.all and not (args.yes or args.dry_run):
        raise ValueError("rm --all deletes every matching session: add --yes to confirm")
    count = 0
    async for page in Selection(args).every(store):
        for info in page:
            if args.dry_run:
                out.write(f"would delete {info.id}\n")
                count += 1
            elif await store.delete(info.key):
                out.write(f"deleted {info.id}\n")
                count += 1
    verb = "would delete" if args.dry_run else "deleted"
    print(f"xun-proxy: {verb} {count} sessions", file=sys.stderr)
    return 0


ACTIONS = {"ls": _ls, "show": _show, "export": _export, "rm": _rm}


async def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run a `sessions` action; ValueError and ConfigError propagate (exit status 2)."""
    action = ACTIONS[args.action]
    if hasattr(args, "older_than"):
        Selection(args)  # a bad --since or --older-than fails before the store is opened
    overrides = {"store_url": args.store_url, "config_file": args.config_file}
    settings = load_settings(overrides)
    store = open_store(
        settings.store_url,
        max_session_bytes=settings.session_max_bytes,
        ttl_seconds=settings.session_ttl_seconds,
    )
    try:
        return await action(args, store, out)
    except LookupError as exc:
        print(f"xun-proxy: no session {exc.args[0]}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"xun-proxy: the session store failed: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
