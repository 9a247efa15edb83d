"""One tool result never freezes the proxy (issue 34, item 1).

When a summary cuts messages, the artifact trail reads each cut tool result for its exit
status and error line. Those scans run on the event loop, over client content: they must be
linear in what they read and read a bounded part of it. A history first seen by the proxy,
100 tool results of which one holds "exit code" + 20,000 spaces + "x" (seconds of regex
backtracking before), is summarised on every wire through real uvicorn: the request answers
in well under 3 s and `/healthz` answers within 1 s all the while. And every scan of the trail
takes at most 5x the time at 4x the size (quadratic would take 16x).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from proxy import artifacts
from proxy.artifacts import (
    _unquoted,
    call_paths,
    command_paths,
    entries_of,
    error_line,
    exit_status,
    text_paths,
)
from proxy.server.app import create_app
from proxy.wire.refusal import missing_tokens, window_of
from tests.conftest import proxy_settings
from tests.core.test_trail_wires import as_items, as_messages
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import UvicornThread
from tests.support.wire_sessions import (
    INSTRUCTIONS,
    MESSAGES_MODEL,
    RESPONSES_MODEL,
    WIRE_COMPACTING,
    wire_proxy,
)

PAYLOAD = "exit code" + " " * 20_000 + "x"
RESULTS = 100
REQUEST_LIMIT = 3.0  # seconds: 10-12 s before the fix
HEALTH_LIMIT = 1.0


def chat_history() -> list[dict[str, Any]]:
    """A task, then 100 bash calls each with its result; the 10th result is the payload."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Look through the project. Do not edit tests."},
    ]
    for n in range(RESULTS):
        command = json.dumps({"command": f"cat src/module_{n}.py"})
        call = {"id": f"call_{n:03d}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": command}
        messages.append({"role": "assistant", "content": f"Step {n}.", "tool_calls": [call]})
        output = PAYLOAD if n == 10 else f"def f_{n}():\n    return {n}\n" * 60
        messages.append({"role": "tool", "tool_call_id": f"call_{n:03d}", "content": output})
    return messages


@dataclass
class Target:
    url: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@contextmanager
def target(wire: str) -> Iterator[Target]:
    """The proxy (real uvicorn) in front of the wire's fake, and the request to send it."""
    chat = chat_history()
    if wire == "chat":
        with FakeUpstream() as fake:
            settings = proxy_settings(fake, **WIRE_COMPACTING)
            with UvicornThread(create_app(settings)) as server:
                body = {"model": "gpt-4o", "messages": chat}
                headers = {"authorization": "Bearer sk-client", "session-id": "scan-chat"}
                yield Target(server.url, "/v1/chat/completions", body, headers)
        return
    with wire_proxy() as proxy:
        if wire == "responses":
            items = as_items(chat[1:])
            body = {"model": RESPONSES_MODEL, "instructions": INSTRUCTIONS, "input": items}
            headers = {"authorization": "Bearer sk-client", "session-id": "scan-responses"}
            yield Target(proxy.url, "/v1/responses", {**body, "store": False}, headers)
        else:
            system, messages = as_messages(chat)
            body = {"model": MESSAGES_MODEL, "max_tokens": 1024, "messages": messages}
            headers = {
                "x-api-key": "sk-ant-client",
                "anthropic-version": "2023-06-01",
                "x-claude-code-session-id": "scan-messages",
            }
            yield Target(proxy.url, "/v1/messages", {**body, "system": system}, headers)


@pytest.mark.parametrize("wire", ["chat", "responses", "messages"])
def test_a_result_built_to_backtrack_neither_slows_the_request_nor_the_loop(wire: str) -> None:
    artifacts.forget()  # the proxy runs in this process: no scan remembered from another test
    with target(wire) as t:
        answer: list[httpx.Response] = []
        took: list[float] = []

        def send() -> None:
            start = time.monotonic()
            with httpx.Client(timeout=120) as client:
                answer.append(client.post(t.url + t.path, json=t.body, headers=t.headers))
            took.append(time.monotonic() - start)

        request = threading.Thread(target=send)
        request.start()
        health: list[float] = []  # each /healthz's time while the request was in flight
        with httpx.Client(timeout=30) as client:
            while True:  # at least one probe, however soon the request is answered
                start = time.monotonic()
                assert client.get(t.url + "/healthz").status_code == 200
                health.append(time.monotonic() - start)
                if not request.is_alive():
                    break
                time.sleep(0.02)
        request.join()
        assert answer and answer[0].status_code == 200, answer[0].text if answer else None
        assert answer[0].headers["x-xun-compaction"] == "summary"  # the payload was cut
        assert health and max(health) < HEALTH_LIMIT, health
        assert took[0] < REQUEST_LIMIT, took


# -- linear time ------------------------------------------------------------------------------


def cpu_seconds(scan: Callable[[], object]) -> float:
    """Best of 3 (process CPU time), each with nothing remembered from the last."""
    best = float("inf")
    for _ in range(3):
        artifacts.forget()
        start = time.process_time()
        scan()
        best = min(best, time.process_time() - start)
    return best


def span_of(results: list[str]) -> list[dict[str, Any]]:
    span: list[dict[str, Any]] = []
    for n, output in enumerate(results):
        call = {"id": f"c{n}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": json.dumps({"command": "make"})}
        span.append({"role": "assistant", "content": None, "tool_calls": [call]})
        span.append({"role": "tool", "tool_call_id": f"c{n}", "content": output})
    return span


def spaced(n: int) -> str:
    return "exit code" + " " * n + "x"


# name -> the scan of an input of about n characters: runs the old patterns backtracked over
# (white space after a key, a long word that could open a URL, escaped quotes never closed),
# and a span of such results.
SCANS: dict[str, Callable[[int], Callable[[], object]]] = {
    "exit_code_then_spaces": lambda n: lambda: exit_status(spaced(n)),
    "return_code_then_spaces": lambda n: lambda: exit_status("return code" + " " * n + "x"),
    "error_line_of_spaced_result": lambda n: lambda: error_line(spaced(n)),
    "word_with_no_scheme_end": lambda n: lambda: text_paths("a" * n),
    "escaped_quotes_never_closed": lambda n: lambda: command_paths('grep "' + '\\"' * (n // 2)),
    # The same, under the 16 KiB a command is read up to: the quote remover alone.
    "escaped_quotes_unbounded": lambda n: lambda: _unquoted('grep "' + '\\"' * (n // 2)),
    "call_arguments": lambda n: lambda: call_paths("Task", json.dumps({"prompt": "a" * n})),
    # An upstream's length refusal may quote the request: a run of digits backtracked there.
    "refusal_of_digits": lambda n: lambda: missing_tokens({"error": {"message": "1" * n}}),
    "refusal_of_token_counts": lambda n: (
        lambda: window_of({"error": {"message": "9 tokens " * (n // 9)}})
    ),
    "span_of_spaced_results": lambda n: (
        lambda: entries_of(span_of([spaced(2000) + str(i) for i in range(n // 2000)]))
    ),
}
SIZE = 60_000  # characters: quadratic scans take seconds here, linear ones milliseconds


@pytest.mark.parametrize("name", list(SCANS))
def test_every_trail_scan_takes_linear_time(name: str) -> None:
    # 8 times the input: a linear scan takes about 8 times as long, a quadratic one 64 times.
    # The bound, 16, leaves a factor of 2 for noise either way (at 4 times the input and a
    # bound of 5, a run beside the suite and two CPU hogs measured 5.06).
    small = cpu_seconds(SCANS[name](SIZE))
    large = cpu_seconds(SCANS[name](8 * SIZE))
    artifacts.forget()
    assert large <= 16 * max(small, 1e-3), (name, small, large)
