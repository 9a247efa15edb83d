"""`xun-proxy report`: the savings report (`proxy.admin.savings_report`) printed from a store.

    xun-proxy report [--since 24h] [--until TIME] [--by model|tenant|session]
                     [--format table|json|csv] [--prices FILE] [--store URL]

It reads the store only, so it works on a stopped proxy's SQLite file or on a Redis store a
fleet shares. TIME is an age (`24h`, `7d`), ISO 8601 (UTC without an offset) or epoch
seconds. `json` prints what `GET /admin/savings` answers; `table` and `csv` print one row per
group, then the total (and the shadow turns' projected savings, when there are any).
Exit status: 0, 1 when the store fails, 2 for bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from proxy.admin.savings_report import BY, check_window, report, when
from proxy.compaction.prices import Prices
from proxy.settings import load_settings
from proxy.store import StoreError, open_store

COLUMNS = (
    "requests",
    "prompt_tokens_sent",
    "prompt_tokens_direct",
    "tokens_saved",
    "saved_ratio",
    "cost_sent",
    "cost_direct",
    "cost_saved",
    "summary_cost",
    "extract_cost",
)


def add_parser(commands: Any, add_config_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `report` to the CLI's subcommands."""
    parser = commands.add_parser("report", help="tokens and money the proxy saved")
    add_config_flags(parser)
    parser.add_argument("--since", help="window start: an age (24h, 7d), ISO 8601 or epoch")
    parser.add_argument("--until", help="window end, as --since (default: now)")
    parser.add_argument("--by", choices=BY, default="model", help="group rows by (default model)")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--prices", metavar="FILE", help="JSON file of model prices")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    text = str(value)
    return "".join(c if c.isprintable() else "?" for c in text)[:40]


def _rows(body: dict[str, Any], *, named: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(key, totals) per group, then the total; `named`: a session as its header value and
    the start of its id (a table), else by its id alone."""
    rows = [
        (
            f"{group['session']} [{group['key'][:8]}]"
            if named and "session" in group
            else group["key"],
            group,
        )
        for group in body["groups"]
    ]
    rows.append(("TOTAL", body["totals"]))
    return rows


def _table(body: dict[str, Any], out: TextIO) -> None:
    header = (body["by"], *COLUMNS)
    lines = [header] + [
        (_cell(key), *(_cell(row.get(c)) for c in COLUMNS)) for key, row in _rows(body, named=True)
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out.write(f"savings {body['since'] or 'from the start'} .. {body['until']}\n")
    for line in lines:
        cells = [line[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)
        ]
        out.write("  ".join(cells).rstrip() + "\n")
    projected = body["projected"]
    if projected["requests"]:
        out.write(
            f"projected (shadow turns, not included above): {projected['requests']} requests, "
            f"{projected['tokens_saved']} tokens saved of {projected['prompt_tokens_direct']}, "
            f"cost saved {_cell(projected['cost_saved'])}\n"
        )


def _csv(body: dict[str, Any], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((body["by"], *COLUMNS))
    for key, row in _rows(body):
        writer.writerow((key, *("" if row.get(c) is None else row.get(c) for c in COLUMNS)))


async def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the report; ValueError and ConfigError propagate (exit status 2)."""
    now = time.time()
    since = when(args.since, now=now, naive_is_utc=True)
    until = when(args.until, now=now, naive_is_utc=True)
    check_window(since, until, now=now)
    overrides = {"store_url": args.store_url, "config_file": args.config_file}
    if args.prices:
        overrides["prices"] = args.prices
    settings = load_settings(overrides)
    store = open_store(
        settings.store_url,
        max_session_bytes=settings.session_max_bytes,
        ttl_seconds=settings.session_ttl_seconds,
    )
    try:
        body = await report(
            store, Prices(settings.prices), since=since, until=until, by=args.by, now=lambda: now
        )
    except StoreError as exc:
        print(f"xun-proxy: the session store failed: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    if args.format == "json":
        out.write(json.dumps(body, indent=2) + "\n")
    elif args.format == "csv":
        _csv(body, out)
    else:
        _table(body, out)
    return 0


__all__ = ["add_parser", "run"]
