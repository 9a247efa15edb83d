"""Canonical message form: what must and must not change a session's fingerprint."""

from __future__ import annotations

from hashlib import sha256
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.session.fingerprint import PrefixChain, canonical, raw_digests

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}


@pytest.mark.parametrize(
    ("sent", "echoed"),
    [
        # SDK model dumps carry null fields the client never set.
        (
            {"role": "assistant", "content": "hi"},
            {
                "role": "assistant",
                "content": "hi",
                "refusal": None,
                "audio": None,
                "annotations": [],
                "function_call": None,
                "tool_calls": None,
            },
        ),
        (
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ),
        ({"content": "x", "role": "user"}, {"role": "user", "content": "x"}),
        (
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "assistant", "content": "", "tool_calls": [{**CALL, "index": 0}]},
        ),
        (
            {"role": "assistant", "content": "a", "reasoning_content": "thinking"},
            {"role": "assistant", "content": "a"},
        ),
    ],
)
def test_equal_forms(sent: dict[str, Any], echoed: dict[str, Any]) -> None:
    assert canonical(sent) == canonical(echoed)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"role": "user", "content": "hi"}, {"role": "user", "content": "hi!"}),
        ({"role": "user", "content": "hi"}, {"role": "system", "content": "hi"}),
        (
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "tool", "tool_call_id": "b", "content": "x"},
        ),
        (
            {"role": "assistant", "tool_calls": [CALL]},
            {
                "role": "assistant",
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{}"}}],
            },
        ),
        ({"role": "user", "content": "hi", "name": "ann"}, {"role": "user", "content": "hi"}),
    ],
)
def test_different_forms(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert canonical(a) != canonical(b)


def test_prefix_chain_is_stable_under_appends() -> None:
    msgs = [{"role": "user", "content": str(i)} for i in range(10)]
    short, long = PrefixChain(msgs[:6]), PrefixChain(msgs)
    for n in range(7):
        assert short.prefix(n) == long.prefix(n)
    assert long.prefix(7) != long.prefix(6)
    assert long.matches(6, short.prefix(6))
    assert not long.matches(11, short.prefix(6))
    assert not long.matches(6, None)
    assert long.common_prefix(short.digests) == 6


def test_prefix_of_different_lengths_differ_even_for_empty_messages() -> None:
    chain = PrefixChain([{}, {}, {}])
    assert len({chain.prefix(n) for n in range(4)}) == 4


def test_a_trusted_prefix_gives_the_same_hashes_as_hashing_from_the_start() -> None:
    msgs = [{"role": "user", "content": str(i)} for i in range(12)]
    full = PrefixChain(msgs)
    trusted = PrefixChain(msgs, trusted=(7, full.prefix(7)))
    assert [trusted.prefix(n) for n in range(7, 13)] == [full.prefix(n) for n in range(7, 13)]
    # Only the messages after the trusted prefix were canonicalised for those.
    assert trusted._digests[:7] == [None] * 7
    # A prefix before it is hashed from the start, and still agrees.
    assert [trusted.prefix(n) for n in range(13)] == [full.prefix(n) for n in range(13)]


def test_raw_digests_see_key_order_that_the_canonical_form_ignores() -> None:
    a = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    b = [{"content": "x", "role": "user"}, {"role": "assistant", "content": "y"}]
    first, whole = raw_digests(a, 1)
    assert raw_digests(a, 2) == (whole, whole)
    assert first == raw_digests(a[:1], 0)[1] and first != whole
    assert raw_digests(a, 0)[0] == raw_digests([], 0)[1]
    assert raw_digests(a, 3)[0] is None
    assert raw_digests(b, 1)[0] != first
    assert PrefixChain(a).prefix(2) == PrefixChain(b).prefix(2)


def test_raw_digests_hash_the_list_as_orjson_writes_it() -> None:
    msgs = [{"role": "user", "content": f"m{i}", "parts": [1, {"a": None}]} for i in range(4)]
    for n in range(-1, 6):
        expected = sha256(orjson.dumps(msgs[:n])).hexdigest() if 0 <= n <= 4 else None
        assert raw_digests(msgs, n) == (expected, sha256(orjson.dumps(msgs)).hexdigest())
    # A message at orjson's depth limit cannot be written inside a list: it is hashed alone,
    # to the same bytes.
    deep = {"role": "user", "content": orjson.loads(b"[" * 253 + b"]" * 253)}
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps([deep])
    written = b"[" + orjson.dumps(deep) + b"," + orjson.dumps(deep) + b"]"
    first = sha256(b"[" + orjson.dumps(deep) + b"]").hexdigest()
    assert raw_digests([deep, deep], 1) == (first, sha256(written).hexdigest())


def test_raw_digests_cut_the_prefix_from_the_whole_list_written_once() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a, b], [c"},  # brackets and commas inside strings
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "tool_call_id": "1", "content": "ok"},
    ]
    whole = orjson.dumps(messages)
    for n in range(-1, len(messages) + 2):
        assert raw_digests(messages, n, whole) == raw_digests(messages, n)
    # bytes that are not this list's are not trusted: the prefix is written again
    other = orjson.dumps([*messages[:2], {"role": "user", "content": "x"}, messages[3]])
    assert raw_digests(messages, 2, other[:-20] + whole[-20:]) == raw_digests(messages, 2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from("abc"), st.text(max_size=5)), max_size=6),
    st.lists(st.dictionaries(st.sampled_from("abc"), st.text(max_size=5)), max_size=4),
    st.integers(-1, 12),
)
def test_raw_digests_go_on_from_the_last_requests_hash(
    last: list[dict[str, Any]], added: list[dict[str, Any]], n: int
) -> None:
    """A request whose history starts with the last one's hashes only what it adds, to the
    same digests, and keeps the hash of all its items for the next."""
    kept: list[Any] = []
    before = orjson.dumps(last)
    raw_digests(last, len(last), before, keep=kept.append)
    assert kept[0].hexdigest() == sha256(before[:-1]).hexdigest()
    now = [*last, *added]
    whole = orjson.dumps(now)
    resume = (len(last), len(before) - 1, kept[0])
    later: list[Any] = []
    assert raw_digests(now, n, whole, resume=resume, keep=later.append) == raw_digests(now, n)
    assert later[0].hexdigest() == sha256(whole[:-1]).hexdigest()
    assert kept[0].hexdigest() == sha256(before[:-1]).hexdigest()  # never read on in place
