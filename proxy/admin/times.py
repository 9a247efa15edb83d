"""Times and ages as operators write them, for the admin API's queries and the sessions CLI."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(value: str, *, naive_is_utc: bool = True) -> float:
    """Epoch seconds from epoch seconds or an ISO 8601 time. A time without a UTC offset is
    UTC with `naive_is_utc` (the CLI), else refused (the admin API, whose callers may be
    anywhere)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"not a time: {value!r} (use ISO 8601 or epoch seconds)") from exc
    if stamp.tzinfo is None:
        if not naive_is_utc:
            raise ValueError("an ISO 8601 time needs a UTC offset (e.g. Z or +00:00)")
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def parse_age(value: str) -> float:
    """Seconds from `30d`, `12h`, `45m`, `90s`, `2w` or a plain number of seconds."""
    m = _AGE.match(value)
    if m is None:
        raise ValueError(f"not an age: {value!r} (use e.g. 90s, 45m, 12h, 30d, 2w)")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
