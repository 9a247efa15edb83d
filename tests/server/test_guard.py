"""proxy.server.guard's header rules, on ASGI scopes: optional whitespace stripped, a credential
header given twice refused. Its timeouts run against real sockets in
tests/reliability/test_findings_server.py."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.server.guard import CREDENTIAL_HEADERS, tidy_headers


def scope_with(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"bar ", b"bar"),
        (b" bar", b"bar"),
        (b"\tbar\t", b"bar"),
        (b"a b  c ", b"a b  c"),  # whitespace inside a value stays
        (b"   ", b""),
        (b"", b""),
    ],
)
def test_optional_whitespace_is_stripped(value: bytes, expected: bytes) -> None:
    scope = scope_with((b"x-foo", value), (b"user-agent", b"curl/8 "))
    assert tidy_headers(scope) is None
    assert scope["headers"] == [(b"x-foo", expected), (b"user-agent", b"curl/8")]


def test_tidy_headers_are_left_as_they_are() -> None:
    headers = [(b"authorization", b"Bearer sk-a"), (b"x-foo", b"bar")]
    scope = scope_with(*headers)
    assert tidy_headers(scope) is None
    assert scope["headers"] == headers


@pytest.mark.parametrize("name", sorted(CREDENTIAL_HEADERS))
def test_a_credential_header_given_twice_is_refused(name: bytes) -> None:
    for second in (b"Bearer sk-other", b"Bearer sk-same"):
        scope = scope_with((name, b"Bearer sk-same"), (b"x-foo", b"1"), (name, second))
        error = tidy_headers(scope)
        assert error is not None
        assert (error.status, error.code, error.param) == (400, "duplicate_header", name.decode())
        assert b"sk-" not in error.message.encode()


def test_different_credential_headers_and_repeated_others_pass() -> None:
    scope = scope_with(
        (b"authorization", b"Bearer sk-a"),
        (b"x-api-key", b"sk-b"),
        (b"api-key", b"sk-c"),
        (b"accept", b"a"),
        (b"accept", b"b"),
    )
    assert tidy_headers(scope) is None
