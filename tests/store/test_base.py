"""Pure parts of the contract: session ids, cursors, Redis key segments."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from proxy.store import SessionKey
from proxy.store.base import decode_cursor, encode_cursor
from proxy.store.redis_layout import key_part

URL_SAFE = set(string.ascii_letters + string.digits + "-_")


@given(st.text(), st.text())
def test_ids_are_url_safe_and_stable(tenant: str, session: str) -> None:
    key = SessionKey(tenant, session)
    assert len(key.id) == 22 and set(key.id) <= URL_SAFE
    assert SessionKey.is_valid_id(key.id)
    assert SessionKey(tenant, session).id == key.id


@given(st.text(), st.text(), st.text(), st.text())
def test_distinct_keys_have_distinct_ids(t1: str, s1: str, t2: str, s2: str) -> None:
    if (t1, s1) != (t2, s2):
        assert SessionKey(t1, s1).id != SessionKey(t2, s2).id


def test_known_id() -> None:
    # Admin URLs must not change between releases: pin one value.
    assert SessionKey("tenant", "session").id == "rh3jnXFVMs_e9tu079dZsZ"


def test_is_valid_id_rejects_other_shapes() -> None:
    for value in ("", "short", "x" * 23, "../../../etc/passwd///", "a" * 21 + "/"):
        assert not SessionKey.is_valid_id(value)


@given(st.floats(min_value=0, max_value=1e11), st.text(alphabet="".join(URL_SAFE)))
def test_cursor_round_trip(updated_at: float, session_id: str) -> None:
    assert decode_cursor(encode_cursor(updated_at, session_id)) == (updated_at, session_id)


@given(st.text(max_size=300), st.text(max_size=300))
def test_key_parts_are_injective_and_colon_free(a: str, b: str) -> None:
    assert ":" not in key_part(a) and len(key_part(a)) <= 128
    if a != b:
        assert key_part(a) != key_part(b)


def test_key_parts_stay_readable() -> None:
    assert key_part("tenant-0a1b2c") == "tenant-0a1b2c"
    assert key_part("a/b:c") == "a%2Fb%3Ac"
    assert key_part("x" * 500).startswith("#")
