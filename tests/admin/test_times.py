"""One reader of operators' times and ages: the admin API's `updated_after` and the CLI's
`--since` / `--older-than` (pinned here, both modes, with their refusals)."""

from __future__ import annotations

import pytest

from proxy.admin.times import parse_age, parse_time


@pytest.mark.parametrize(
    ("value", "naive_is_utc", "expected"),
    [
        ("1700000000", True, 1700000000.0),
        ("1700000000.5", False, 1700000000.5),
        ("2023-11-14T22:13:20Z", False, 1700000000.0),
        ("2023-11-14T23:13:20+01:00", False, 1700000000.0),
        ("2023-11-14T22:13:20", True, 1700000000.0),  # the CLI reads it as UTC
        ("2023-11-14", True, 1699920000.0),
    ],
)
def test_times_read_alike(value: str, naive_is_utc: bool, expected: float) -> None:
    assert parse_time(value, naive_is_utc=naive_is_utc) == expected


@pytest.mark.parametrize(
    ("value", "naive_is_utc", "message"),
    [
        ("yesterday", True, "not a time: 'yesterday' (use ISO 8601 or epoch seconds)"),
        ("yesterday", False, "not a time: 'yesterday' (use ISO 8601 or epoch seconds)"),
        ("2023-11-14T22:13:20", False, "an ISO 8601 time needs a UTC offset (e.g. Z or +00:00)"),
    ],
)
def test_what_is_not_a_time_is_refused_in_words(
    value: str, naive_is_utc: bool, message: str
) -> None:
    with pytest.raises(ValueError) as exc:
        parse_time(value, naive_is_utc=naive_is_utc)
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("45m", 2700.0),
        ("12h", 43200.0),
        ("30D", 2592000.0),
        ("2w", 1209600.0),
        (" 1.5 h ", 5400.0),
    ],
)
def test_ages(value: str, seconds: float) -> None:
    assert parse_age(value) == seconds


def test_what_is_not_an_age_is_refused() -> None:
    with pytest.raises(ValueError, match="not an age: '3 days'"):
        parse_age("3 days")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e20", "-5", "9" * 400, "1" + "0" * 5000])
def test_a_time_out_of_range_is_refused_in_words(value: str) -> None:
    with pytest.raises(ValueError, match="time out of range"):
        parse_time(value)


@pytest.mark.parametrize("value", ["99999999999999999w", "9" * 400 + "d", "1" + "0" * 5000])
def test_an_age_out_of_range_is_refused_in_words(value: str) -> None:
    with pytest.raises(ValueError, match="age out of range"):
        parse_age(value)
