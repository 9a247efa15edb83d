"""A request leaves no reference cycle behind: everything it made is freed by its reference
count, and the cycle collector (whose passes land in the slowest requests) finds nothing of
it. The disconnect watcher used to be cancelled at the end of each request, and the
`CancelledError`'s traceback held the frames that held the tasks."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.support.fake_upstream import FakeUpstream, Reply

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
PATHS = {
    "pass-through": {"authorization": "Bearer sk-cycles"},
    "compacting": {"authorization": "Bearer sk-cycles", "x-session-id": "cycles-1"},
}


@pytest.fixture
def saved_garbage() -> Iterator[Callable[[], list[object]]]:
    """Call it to start: what the collector finds from then on is kept for the test."""

    def start() -> list[object]:
        gc.collect()
        gc.garbage.clear()
        gc.set_debug(gc.DEBUG_SAVEALL)
        return gc.garbage

    try:
        yield start
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


OURS = ("proxy", "uvicorn", "starlette")


def _request_objects(garbage: list[object]) -> list[str]:
    """The garbage that belongs to the proxy's requests: its own objects, the server's and
    the framework's, and tasks."""
    found = []
    for obj in garbage:
        kind = type(obj)
        module = getattr(kind, "__module__", "") or ""
        if isinstance(obj, asyncio.Task) or module.split(".")[0] in (
            "proxy",
            "uvicorn",
            "starlette",
        ):
            found.append(f"{module}.{kind.__qualname__}")
    return found


def _content(text: str, stream: bool) -> str:
    if not stream:
        return str(json.loads(text)["choices"][0]["message"]["content"])
    chunks = [json.loads(ln[6:]) for ln in text.split("\n") if ln.startswith("data: {")]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", list(PATHS))
def test_requests_leave_no_reference_cycles(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    saved_garbage: Callable[[], list[object]],
    path: str,
    stream: bool,
) -> None:
    proxy = make_proxy()
    url = proxy.base_url + "/chat/completions"
    with httpx.Client(timeout=10) as client:

        def ask(n: int) -> None:
            fake_upstream.push(Reply.text(f"answer-{n}"))
            resp = client.post(url, json={**BODY, "stream": stream}, headers=PATHS[path])
            assert resp.status_code == 200
            assert _content(resp.text, stream) == f"answer-{n}"

        ask(0)  # the first request's one-off set-up (imports, pools) is not the point here
        proxy.settle()
        garbage = saved_garbage()
        for n in range(1, 13):
            ask(n)
        proxy.settle()
        gc.collect()
    assert _request_objects(garbage) == []
