"""Logs a person can read: one line a request, for a terminal (`--log-format console`).

    14:02:07.311 200 chat   gpt-4o  3f9a2c1b7d0e toolcall  sent 3,194 saved 1,777  12 ms

Each access line carries the time, status, API (the wire of a model route, else the method
of another route), model, session (its id's first 12 characters), compaction (`shadow:...` for a
shadowed request), the prompt tokens sent as billed, the tokens saved (net, as the savings
report counts them: what the client's request would have been billed direct less what was
billed, projected for a shadowed request; `-` when unknown) and the milliseconds.
Other records read `time level logger: message key=value ...`. The fields go through the
same redaction as the JSON lines (`proxy.server.logging.redact`); colour (ANSI) only when
asked for, which the CLI does for a terminal that allows it (`proxy.settings.colour_allowed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

ACCESS_LOGGER = "proxy.access"
NONE = "-"

_RESET = "\x1b[0m"
_DIM, _BOLD = "\x1b[2m", "\x1b[1m"
_RED, _GREEN, _YELLOW = "\x1b[31m", "\x1b[32m", "\x1b[33m"
_MAGENTA, _CYAN = "\x1b[35m", "\x1b[36m"
_LEVELS = {"DEBUG": _DIM, "INFO": _GREEN, "WARNING": _YELLOW, "ERROR": _RED, "CRITICAL": _RED}
_COMPACTIONS = {"toolcall": _CYAN, "summary": _MAGENTA, "failed": _RED, "unsupported": _YELLOW}


def _number(value: Any) -> str:
    ok = isinstance(value, int) and not isinstance(value, bool)
    return f"{value:,}" if ok else NONE


def saved_tokens(fields: Mapping[str, Any]) -> int | None:
    """The request's net saving as the savings report counts it (`proxy.turn.billing`: the
    direct estimate less every prompt token billed, projected for a shadowed request); else
    the turn's estimated tokens before minus after its compaction, when both are known."""
    savings = fields.get("savings")
    if isinstance(savings, Mapping):
        saved = savings.get("projected_saved" if savings.get("shadow") else "saved")
        if isinstance(saved, int) and not isinstance(saved, bool):
            return saved
    before, after = fields.get("tokens_before"), fields.get("tokens_after")
    if isinstance(before, int) and isinstance(after, int):
        return before - after
    return None


def compaction_text(fields: Mapping[str, Any]) -> str:
    compaction = fields.get("compaction")
    text = str(compaction) if compaction else NONE
    if fields.get("degraded") and text in (NONE, "none"):
        text = str(fields["degraded"])  # why nothing was done: store_unavailable, ...
    return f"shadow:{text}" if fields.get("shadow") else text


class ConsoleFormatter(logging.Formatter):
    """One readable line a record; the access log's lines in columns."""

    def __init__(
        self, *, colour: bool = False, redact: Callable[..., dict[str, Any]], pid: bool = False
    ) -> None:
        super().__init__()
        self.colour = colour
        self.redact = redact
        self.pid = pid  # `[pid]` after the time: which worker wrote the line

    def paint(self, text: str, code: str | None) -> str:
        return f"{code}{text}{_RESET}" if self.colour and code else text

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        when += f" [{record.process}]" if self.pid else ""
        fields = getattr(record, "fields", None)
        fields = self.redact(fields) if isinstance(fields, Mapping) else {}
        if record.name == ACCESS_LOGGER and "status" in fields:
            line = f"{self.paint(when, _DIM)} {self.request(fields)}"
        else:
            level = self.paint(f"{record.levelname:<7}", _LEVELS.get(record.levelname))
            extra = " ".join(f"{key}={value}" for key, value in fields.items())
            line = f"{self.paint(when, _DIM)} {level} {record.name}: {record.getMessage()}"
            line += f" {extra}" if extra else ""
        if record.exc_info and record.exc_info[1] is not None:
            line += f" ({type(record.exc_info[1]).__name__})"
        return line

    def request(self, f: Mapping[str, Any]) -> str:
        status = f.get("status")
        code = int(status) if isinstance(status, int) else 0
        tone = _GREEN if 200 <= code < 400 else _YELLOW if code < 500 else _RED
        api = f.get("wire") or f.get("path") or NONE  # a model route's API, else the path
        session = str(f.get("session") or NONE)
        compaction = compaction_text(f)
        ms = f.get("duration_ms")
        elapsed = f"{ms:>6.0f} ms" if isinstance(ms, int | float) else f"{NONE:>6} ms"
        saved = saved_tokens(f)
        return " ".join(
            [
                self.paint(f"{code:>3}", tone),
                f"{str(api)[:28]:<10}",
                f"{str(f.get('model') or NONE)[:28]:<14}",
                f"{session[:12]:<12}",
                self.paint(f"{compaction:<9}", _COMPACTIONS.get(compaction.split(":")[-1])),
                f"sent {_number(f.get('prompt_tokens')):>7}",
                self.paint(f"saved {_number(saved):>7}", _BOLD if saved else None),
                elapsed,
            ]
        )


__all__ = ["ConsoleFormatter", "compaction_text", "saved_tokens"]
