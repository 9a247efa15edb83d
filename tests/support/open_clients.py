"""A pytest plugin: every HTTP client a test opens is closed by the end of that test.

An SDK client (`openai.OpenAI`, `anthropic.Anthropic`) or an `httpx.Client` that a test drops
without closing keeps its kept-alive sockets until the garbage collector finds the client's
reference cycles. The SDK closes its client in `__del__`, but a collection finalizes the cycle's
objects in no set order: when a socket goes first, its `ResourceWarning` ("unclosed
<socket.socket ...>") surfaces in whatever test the collection ran in, on that xdist worker,
and fails it (warnings are errors). Loaded machines move collections around and made this one
of the suite's rare failures.

So the leak is caught where it happens: every sync and async httpx (or httpx2) client made from
test code while a test runs (SDK clients are both) is remembered, and at the end of the test one
still open fails that test's teardown, naming where it was made. Clients made by the proxy's own
code (it closes them at shutdown), or while a fixture wider than one test is set up, are not the
test's to close; a library's process-wide client (the Agents SDK's trace exporter) is made in
such a fixture.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Generator
from typing import Any

import httpx
import pytest

# Python's own modules and installed packages (pytest, the SDKs, httpx): not test code.
_PATHS = sysconfig.get_paths()
_LIBRARIES = tuple(
    {_PATHS[name] + os.sep for name in ("stdlib", "platstdlib", "purelib", "platlib")}
)

# (client, where it was made) for the running test; None outside a test's own fixtures and body
_opened: list[tuple[Any, str]] | None = None


def _made_by_a_test() -> str | None:
    """Where test code made the client being built, or None if the proxy made it (the first
    frame outside Python's modules and the installed packages decides)."""
    start = frame = sys._getframe(2)
    depth = 1
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("proxy."):
            return None
        path = frame.f_code.co_filename
        if not path.startswith(_LIBRARIES) and not path.startswith("<"):
            # from the test's line down to the client's constructor
            return "".join(traceback.format_stack(start, limit=depth))
        frame = frame.f_back  # type: ignore[assignment]
        depth += 1
    return None


def _remembering(cls: Any) -> None:
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened = _opened
        if opened is not None:
            where = _made_by_a_test()
            if where is not None:
                opened.append((self, where))

    cls.__init__ = __init__


# The SDKs' clients are built on httpx, or on its successor httpx2 in their newer releases.
_CLIENTS: list[Any] = [httpx.Client, httpx.AsyncClient]
try:
    import httpx2

    _CLIENTS += [httpx2.Client, httpx2.AsyncClient]
except ImportError:  # an SDK release still on httpx
    pass
for _cls in _CLIENTS:
    _remembering(_cls)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Generator[None, Any, Any]:
    """A fixture shared by more than one test closes its clients when it ends, not per test."""
    global _opened
    if fixturedef.scope == "function":
        return (yield)
    saved, _opened = _opened, None
    try:
        return (yield)
    finally:
        _opened = saved


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    global _opened
    _opened = []
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    global _opened
    try:
        yield  # the test's fixtures close what they opened
    finally:
        opened, _opened = _opened or [], None
    left = [(client, where) for client, where in opened if not client.is_closed]
    for client, _ in left:
        if hasattr(client, "close"):  # a sync client; an async one needs its loop
            client.close()
    if left:
        made = "\n".join(where for _, where in left)
        pytest.fail(f"{len(left)} HTTP client(s) left open by this test, made at:\n{made}")
