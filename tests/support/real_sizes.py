"""What the sessions of tests/test_real_sizes*.py share: sizes, the proxy, each turn's outcome.

A session there runs against a fake of tests/support/fake_counting.py, whose count differs from the
proxy's estimate, with the threshold a user sets for the fake's window.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from proxy.server.app import create_app
from tests.support.fake_upstream import RecordedRequest
from tests.support.servers import UvicornThread

MODEL = "small-local-model"  # no window the proxy knows: only the user's threshold
WINDOW_SHARE = 0.6  # the threshold a user sets for a window (the proxy's own default share)
COMPACTORS = ["seed", "cache-aware"]


@dataclass(frozen=True)
class Sizes:
    window: int  # the upstream's context window, in its own tokens
    output_chars: int  # one tool result
    text_chars: int  # what the model says before each call
    turns: int  # client turns before the model stops reading

    @property
    def threshold(self) -> int:
        return int(self.window * WINDOW_SHARE)


def file_body(path: str, size: int) -> str:
    """What `read_file(path)` returns: recognisable lines, `size` characters."""
    line = f"{path}: " + "def f(x): return x + 1  # " + "q" * 30 + "\n"
    return (line * (size // len(line) + 1))[:size]


@contextmanager
def serve_proxy(settings: Any) -> Iterator[UvicornThread]:
    with UvicornThread(create_app(settings)) as proxy:
        yield proxy


@dataclass
class Outcome:
    """One client turn: its status, what the proxy did, what reached the upstream."""

    status: int
    code: str | None
    compaction: str | None
    requests: list[RecordedRequest] = field(default_factory=list)
    refused: list[bool] = field(default_factory=list)  # per request: refused for its length
    trail: list[str] = field(default_factory=list)  # per request: what it was, what it counted


def stuck(outcomes: list[Outcome]) -> bool:
    """Three refusals in a row: the history no longer changes, so the session is over."""
    return len(outcomes) >= 3 and all(o.status != 200 for o in outcomes[-3:])


def failures(outcomes: list[Outcome]) -> list[str]:
    """Each turn not answered 200, with what reached the upstream meanwhile when known."""
    return [
        f"turn {n}: {o.status} {o.code}" + (f" (upstream: {', '.join(o.trail)})" if o.trail else "")
        for n, o in enumerate(outcomes, 1)
        if o.status != 200
    ]
