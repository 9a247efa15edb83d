"""Graceful shutdown: SIGTERM drains the proxy process (proxy.server.lifecycle) before it exits 0.

/readyz turns 503 first, new requests get an OpenAI-shaped 503 with Retry-After, streams in
flight finish (up to the drain timeout, then they end with an error event), exit status 0.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.reliability.conftest import SpawnProxy, wait_until
from tests.support.fake_upstream import FakeUpstream, Reply

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "stream": True}
PATHS = {
    "pass-through": {"authorization": "Bearer sk-drain"},
    "compacting": {"authorization": "Bearer sk-drain", "x-session-id": "drain-1"},
}


def assert_draining_503(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers.get("x-should-retry") != "false"  # another replica can serve it
    assert response.headers["connection"] == "close"
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("server_error", "draining")


@pytest.mark.parametrize("path", list(PATHS))
def test_sigterm_drains_in_flight_stream_then_exits_0(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, path: str
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("first, and then the rest of it", hold=hold))
    proxy = spawn_proxy(upstream=fake_upstream.url, drain_timeout=20)
    try:
        with httpx.Client(timeout=30) as client:
            url = proxy.base_url + "/chat/completions"
            with client.stream("POST", url, json=CHAT, headers=PATHS[path]) as stream:
                chunks = stream.iter_raw()
                assert next(chunks).startswith(b"data: ")
                signalled = time.monotonic()
                proxy.signal(signal.SIGTERM)

                def not_ready() -> bool:
                    return httpx.get(proxy.url + "/readyz").status_code == 503

                assert wait_until(not_ready, 2)
                readyz = httpx.get(proxy.url + "/readyz")
                assert readyz.json()["status"] == "draining"
                assert httpx.get(proxy.url + "/healthz").status_code == 200
                # A new connection and a new request on a fresh client: both turned away.
                assert_draining_503(httpx.get(proxy.base_url + "/models"))
                assert_draining_503(httpx.post(url, json=CHAT, headers=PATHS["compacting"]))
                assert proxy.process is not None and proxy.process.poll() is None
                time.sleep(0.5)  # still waiting for the stream, not exiting
                assert proxy.process.poll() is None
                released = time.monotonic()
                hold.set()
                rest = b"".join(chunks)
        assert rest.endswith(b"data: [DONE]\n\n")
        assert b'"error"' not in rest
        assert proxy.wait(timeout=10) == 0
        exited = time.monotonic()
    finally:
        hold.set()
    # The process left soon after the stream finished, not at the drain timeout.
    assert exited - released < 3.0, (exited - released, released - signalled)
    logs = proxy.logs()
    assert b'"msg":"drained"' in logs
    assert b"Traceback" not in logs


def test_drain_timeout_ends_open_streams_with_an_error_event(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("this stream never finishes on its own", hold=hold))
    proxy = spawn_proxy(upstream=fake_upstream.url, drain_timeout=1)
    try:
        with httpx.Client(timeout=30) as client:
            url = proxy.base_url + "/chat/completions"
            with client.stream("POST", url, json=CHAT, headers=PATHS["compacting"]) as stream:
                chunks = stream.iter_raw()
                next(chunks)
                signalled = time.monotonic()
                proxy.signal(signal.SIGTERM)
                rest = b"".join(chunks)
        ended = time.monotonic()
        assert proxy.wait(timeout=10) == 0
        exited = time.monotonic()
    finally:
        hold.set()
    events = [e for e in rest.split(b"\n\n") if e]
    assert events[-1].startswith(b'data: {"error"')
    assert b'"code":"proxy_shutdown"' in events[-1]
    assert 0.9 < ended - signalled < 5.0  # the 1 s drain timeout, with 5x margin
    assert exited - signalled < 5.0
    assert b'"msg":"drain timeout"' in proxy.logs()
    assert fake_upstream.wait_for_disconnect(timeout=5)  # the upstream request was closed too


def test_idle_proxy_exits_at_once(fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy) -> None:
    proxy = spawn_proxy(upstream=fake_upstream.url, drain_timeout=30)
    assert httpx.get(proxy.base_url + "/models").status_code == 200
    started = time.monotonic()
    proxy.signal(signal.SIGTERM)
    assert proxy.wait(timeout=10) == 0
    assert time.monotonic() - started < 30 / 5  # well within the drain timeout it need not wait


def test_second_signal_stops_without_waiting(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("held", hold=hold))
    proxy = spawn_proxy(upstream=fake_upstream.url, drain_timeout=60)
    try:
        with httpx.Client(timeout=30) as client:
            url = proxy.base_url + "/chat/completions"
            with client.stream("POST", url, json=CHAT) as stream:
                chunks = stream.iter_raw()
                next(chunks)
                proxy.signal(signal.SIGTERM)
                assert wait_until(lambda: httpx.get(proxy.url + "/readyz").status_code == 503, 2)
                started = time.monotonic()
                proxy.signal(signal.SIGINT)
                assert proxy.wait(timeout=20) == 0
                assert time.monotonic() - started < 60 / 5  # not the 60 s drain timeout
                rest = b"".join(chunks)
                assert b'"code":"proxy_shutdown"' in rest  # not a silent close either
    finally:
        hold.set()


# -- the gate in-process (fast): what a draining app answers ---------------------------------


def test_draining_app_answers_503_but_keeps_probes(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()
    with httpx.Client(timeout=10) as client:
        assert client.get(proxy.url + "/readyz").status_code == 200
        proxy.app.state.drain.begin()
        ready = client.get(proxy.url + "/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "draining"
        assert client.get(proxy.url + "/healthz").status_code == 200
        assert client.get(proxy.url + "/metrics").status_code != 503  # scrapes go on
        for method, route in [
            ("POST", "/v1/chat/completions"),
            ("GET", "/v1/models"),
            ("GET", "/admin/sessions"),
            ("GET", "/nowhere"),
        ]:
            assert_draining_503(client.request(method, proxy.url + route, json=CHAT))
    assert fake_upstream.requests == []
    assert proxy.app.state.drain.in_flight == 0


def test_in_flight_count_follows_streams(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("held stream", hold=hold))
    proxy = make_proxy()
    drain: Any = proxy.app.state.drain
    try:
        with httpx.Client(timeout=10) as client:
            url = proxy.base_url + "/chat/completions"
            with client.stream("POST", url, json=CHAT) as stream:
                chunks = stream.iter_raw()
                next(chunks)
                assert drain.in_flight == 1
                hold.set()
                b"".join(chunks)
        assert wait_until(lambda: drain.in_flight == 0, 2)
    finally:
        hold.set()
