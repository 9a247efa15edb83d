"""proxy.session.json_limits: the bodies orjson cannot write back exactly, and only those."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from proxy.session.json_limits import _may_hold_wide_float, compaction_blocker


def blocker(raw: bytes) -> str | None:
    """The reason, checked the same with the body's `messages` written apart."""
    body = orjson.loads(raw)
    reason = compaction_blocker(raw, body)[0]
    if isinstance(body, dict):
        assert compaction_blocker(raw, body, "messages")[0] == reason
    return reason


@pytest.mark.parametrize(
    ("depth", "expected"), [(253, None), (254, None), (255, "too_deep"), (1000, "too_deep")]
)
def test_containers_deeper_than_orjson_writes(depth: int, expected: str | None) -> None:
    assert blocker(b"[" * depth + b"]" * depth) == expected
    assert blocker(b'{"a":' * depth + b"1" + b"}" * depth) == expected


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        (b"18446744073709551615", None),  # 2**64 - 1
        (b"18446744073709551616", "wide_int"),
        (b"-9223372036854775808", None),  # -2**63
        (b"-9223372036854775809", "wide_int"),
        (b"123456789012345678901234567890", "wide_int"),
        (b"1e19", None),  # a float literal: orjson writes it back as it reads it
        (b"12345678901234567890.5", None),
        (b'"123456789012345678901"', None),  # digits in a string
        (b'"1e+19 and 2E+300"', None),  # text that looks like orjson's wide floats
    ],
)
def test_integers_outside_orjsons_range(literal: bytes, expected: str | None) -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "a+b"}], "x": [%s]}'
    assert blocker(raw % literal) == expected


# What the search means: `<digit>e+` and an exponent of 18 or more.
REFERENCE = re.compile(rb"[0-9]e\+(?:1[89]|[2-9][0-9]|[1-9][0-9][0-9])")


# Forty pluses: past those looked at one by one, the rest is left to the pattern.
PARTS = [b"e", b"+", b"1", b"8", b"9", b"0", b"x", b"e+1", b"3e+", b"+" * 40]


@given(st.lists(st.sampled_from(PARTS)))
@example([b"+" * 40] * 2 + [b"3e+", b"1", b"9"])
@example([b"+" * 40] * 2 + [b"3e+", b"1", b"e+1", b"8"])
def test_the_wide_float_search_finds_what_the_plain_pattern_does(parts: list[bytes]) -> None:
    written = b"".join(parts)
    assert _may_hold_wide_float(written) == bool(REFERENCE.search(written))


def test_a_too_deep_or_wide_history_blocks_when_written_apart() -> None:
    deep = b'{"model":"m","messages":[' + b"[" * 300 + b"]" * 300 + b"]}"
    wide = b'{"model":"m","messages":[{"role":"user","n":123456789012345678901}]}'
    tools = b'{"messages":[],"tools":[{"max":123456789012345678901}]}'
    for raw, reason in ((deep, "too_deep"), (wide, "wide_int"), (tools, "wide_int")):
        assert compaction_blocker(raw, orjson.loads(raw), "messages") == (reason, None)


@given(
    st.dictionaries(
        st.sampled_from(["model", "tools", "stream", "x"]),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
            max_leaves=8,
        ),
    ),
    st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=3), max_size=5),
    st.integers(0, 4),
)
def test_written_apart_puts_the_history_back_byte_for_byte(
    rest: dict[str, object], history: list[dict[str, str]], at: int
) -> None:
    items = list(rest.items())
    items.insert(min(at, len(items)), ("messages", history))
    body = dict(items)
    raw = orjson.dumps(body)
    reason, written = compaction_blocker(raw, body, "messages")
    assert reason is None and written is not None
    assert written.history_json == orjson.dumps(history)
    assert written.body(body) == raw
    copy = {**body, "messages": list(history), "tools": [{"name": "extra"}]}
    assert written.holds(copy["messages"])
    assert written.body(copy) == orjson.dumps(copy)
    assert not written.holds([*history, {}])
