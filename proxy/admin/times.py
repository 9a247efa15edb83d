"""Times and ages as operators write them, for the admin API's queries and the sessions CLI.

A time is epoch seconds between 0 and the end of year 9999 (what a date can show); an age at
most that many seconds. Anything else (nan, inf, 1e20, a number too long to read, an age of
99999999999999999 weeks) is a ValueError in words, never an overflow further on.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

MAX_EPOCH = 253402300799.0  # 9999-12-31T23:59:59Z
_AGE = re.compile(r"^\s*+(\d++(?:\.\d++)?)\s*+([smhdw]?)\s*+$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(value: str, *, naive_is_utc: bool = True) -> float:
    """Epoch seconds from epoch seconds or an ISO 8601 time. A time without a UTC offset is
    UTC with `naive_is_utc` (the CLI), else refused (the admin API, whose callers may be
    anywhere)."""
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None:
        return checked_time(number, value)
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"not a time: {value!r} (use ISO 8601 or epoch seconds)") from exc
    if stamp.tzinfo is None:
        if not naive_is_utc:
            raise ValueError("an ISO 8601 time needs a UTC offset (e.g. Z or +00:00)")
        stamp = stamp.replace(tzinfo=UTC)
    return checked_time(stamp.timestamp(), value)


def checked_time(stamp: float, value: object) -> float:
    """`stamp`, if it is a time a date can show from 1970 on; else a ValueError naming `value`."""
    if not (math.isfinite(stamp) and 0 <= stamp <= MAX_EPOCH):
        raise ValueError(f"time out of range: {value!r} (from 1970 to the year 9999)")
    return stamp


def parse_age(value: str) -> float:
    """Seconds from `30d`, `12h`, `45m`, `90s`, `2w` or a plain number of seconds."""
    m = _AGE.match(value)
    if m is None:
        raise ValueError(f"not an age: {value!r} (use e.g. 90s, 45m, 12h, 30d, 2w)")
    seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
    if not (math.isfinite(seconds) and seconds <= MAX_EPOCH):
        raise ValueError(f"age out of range: {value!r} (at most 8,000 years)")
    return seconds
