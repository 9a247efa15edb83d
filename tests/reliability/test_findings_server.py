"""The server and transport findings of the adversarial probe (issue 13: 2, 3, 7, 8, 9, 10, 11),
each reproduced as the probe did it: raw sockets where a client library would tidy the request
(trickled bodies, duplicated or padded headers, encoded paths), a proxy process for settings
read at startup and for SIGTERM, real uvicorn throughout, loopback only.
"""

from __future__ import annotations

import json
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import MakeProxy
from tests.reliability.conftest import ROOT, SpawnProxy, proxy_env, wait_until
from tests.reliability.rawupstream import TimedUpstream
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import free_port

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
ERROR_FIELDS = {"message", "type", "param", "code"}


# -- raw HTTP/1.1 ----------------------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, Any]:
        """The OpenAI-shaped error of this answer (asserting its shape)."""
        payload = json.loads(self.body)
        assert set(payload) == {"error"} and set(payload["error"]) == ERROR_FIELDS, payload
        error: dict[str, Any] = payload["error"]
        return error


def parse_response(data: bytes) -> RawResponse:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        decoded = b""
        while body:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            decoded, body = decoded + body[:size], body[size + 2 :]
        body = decoded
    return RawResponse(status, headers, body)


def raw_request(port: int, data: bytes, timeout: float = 10.0) -> RawResponse:
    """Send bytes as written (no client-side normalisation) and read the answer to EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return parse_response(received)


def request_bytes(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes | None = None
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def trickle_until_answered(
    port: int, head: bytes, *, gap: float, limit: float, stop_after: float | None = None
) -> RawResponse:
    """Send `head` (a request whose body is declared, not sent), then one body byte every
    `gap` seconds until the proxy answers (or `limit` seconds pass). After `stop_after`
    seconds no more bytes are sent: a byte that lands once the proxy has answered and closed
    draws a reset, which can discard the answer before it is read."""
    with socket.create_connection(("127.0.0.1", port), timeout=gap) as sock:
        sock.sendall(head)
        received = b""
        started = time.monotonic()
        deadline = started + limit
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if stop_after is None or time.monotonic() - started < stop_after:
                    try:
                        sock.sendall(b" ")
                    except OSError:
                        pass  # the proxy closed its side: what it sent is still to be read
                continue
            if not chunk:
                return parse_response(received)
            received += chunk
    raise AssertionError(f"no answer within {limit} s while trickling (got {received!r})")


# -- 2. an empty admin key -------------------------------------------------------------------


def run_until_exit_or_healthy(args: list[str], env: dict[str, str]) -> tuple[int | None, str]:
    """Start `python -m proxy serve`; its exit status and output, or (None, what it served)
    when it came up instead of refusing."""
    port = free_port()
    command = [sys.executable, "-m", "proxy", "serve", "--port", str(port), *args]
    process = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if process.poll() is not None:
                output = process.stdout.read().decode() if process.stdout else ""
                return process.returncode, output
            head = request_bytes("GET", "/admin/sessions", [("Authorization", "Bearer ")])
            try:
                probe = raw_request(port, head, timeout=1)
            except OSError:
                time.sleep(0.05)
                continue
            return None, f"it started; 'Authorization: Bearer ' got {probe.status}"
        return None, "neither exited nor served within 20 s"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.parametrize(
    ("args", "env_value", "source"),
    [
        ([], "", "XUN_ADMIN_KEY"),
        ([], "   ", "XUN_ADMIN_KEY"),
        (["--admin-key", ""], None, "--admin-key"),
    ],
    ids=["env-empty", "env-blank", "flag-empty"],
)
def test_an_empty_admin_key_is_refused_at_startup(
    args: list[str], env_value: str | None, source: str
) -> None:
    env = proxy_env(store="memory://", admin_key=env_value)
    status, output = run_until_exit_or_healthy(args, env)
    assert status == 2, output
    assert "admin.key" in output and source in output, output
    assert "must not be empty" in output, output


def test_a_bearer_with_nothing_after_it_never_opens_admin(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(admin_key="a-real-admin-key")
    for value in ("Bearer ", "Bearer", "Bearer    ", "bearer \t"):
        head = request_bytes("GET", "/admin/sessions", [("Authorization", value)])
        answer = raw_request(proxy.port, head)
        assert answer.status == 401, (value, answer)
        assert answer.error()["code"] == "invalid_admin_key"
    ok = httpx.get(
        proxy.url + "/admin/sessions", headers={"Authorization": "Bearer a-real-admin-key"}
    )
    assert ok.status_code == 200


# -- 3. slow clients and the upstream pool ---------------------------------------------------


def trickled_head(target: str, length: int, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A request head declaring a body of `length` bytes."""
    lines = [f"POST {target} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_trickling_uploads_leave_a_normal_request_answered(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy
) -> None:
    proxy = spawn_proxy(upstream=fake_upstream.url, max_upstream_connections=4, pool_timeout=1)
    stop = threading.Event()
    sockets: list[socket.socket] = []

    def trickle() -> None:  # one byte a second on each upload, as the probe did
        while not stop.wait(1.0):
            for sock in sockets:
                try:
                    sock.sendall(b" ")
                except OSError:
                    pass

    trickler = threading.Thread(target=trickle, daemon=True)
    try:
        for number in range(8):
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            # Pass-through uploads: before the fix each held an upstream connection.
            sock.sendall(trickled_head("/v1/embeddings", 4096, [("X-Upload", str(number))]))
            sock.sendall(b'{"input": ')
            sockets.append(sock)
        trickler.start()
        time.sleep(1.5)  # every upload has started its body
        started = time.monotonic()
        answer = httpx.post(proxy.base_url + "/embeddings", json={"input": "x"}, timeout=10)
        assert answer.status_code == 200, answer.text
        assert time.monotonic() - started < 2.0
        # No trickled request reached the upstream: none holds a connection.
        assert [r.headers.get("x-upload") for r in fake_upstream.requests] == [None]
    finally:
        stop.set()
        for sock in sockets:
            sock.close()


TRICKLED_ROUTES = {
    "pass-through": ("/v1/embeddings", []),
    "chat-pass-through": ("/v1/chat/completions", []),
    "compacting": ("/v1/chat/completions", [("X-Session-Id", "slow-1")]),
    "messages": ("/v1/messages", [("X-Session-Id", "slow-2"), ("x-api-key", "sk-ant-slow")]),
}


@pytest.mark.parametrize("route", list(TRICKLED_ROUTES))
def test_a_body_that_does_not_arrive_in_time_gets_408(
    fake_upstream: FakeUpstream, spawn_proxy: SpawnProxy, route: str
) -> None:
    proxy = spawn_proxy(
        upstream=fake_upstream.url, anthropic_upstream=fake_upstream.base_url, body_timeout=1
    )
    target, headers = TRICKLED_ROUTES[route]
    started = time.monotonic()
    answer = trickle_until_answered(
        proxy.port, trickled_head(target, 4096, headers), gap=0.25, limit=6, stop_after=0.6
    )
    waited = time.monotonic() - started
    assert answer.status == 408, answer
    if route == "messages":  # Anthropic's error shape on its API
        payload = json.loads(answer.body)
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    else:
        error = answer.error()
        assert (error["type"], error["code"]) == ("invalid_request_error", "request_timeout")
    assert answer.headers["connection"] == "close"
    assert 0.9 < waited < 5.0  # the 1 s body timeout, with 5x margin
    assert fake_upstream.requests == []
    # A whole body in time is answered as before.
    assert httpx.post(proxy.base_url + "/embeddings", json={"input": "x"}).status_code == 200


class FloodUpstream:
    """A bare HTTP/1.1 upstream. A request carrying `x-flood` gets an endless event stream
    (chat completion chunks, 64 KiB at a time) until the connection breaks; anything else gets
    a small JSON answer. Counts the floods begun and ended."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.floods_started = 0
        self.floods_ended = 0
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(20)
        data = b""
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                return
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get(b"content-length", b"0"))
        while len(body) < length:
            body += sock.recv(65536)
        if b"x-flood" not in headers:
            payload = json.dumps({"object": "list", "data": []}).encode()
            sock.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
                + payload
            )
            return
        chunk = {
            "id": "chatcmpl-flood",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {"content": "x" * 4000}, "finish_reason": None}],
        }
        event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        part = event * (65536 // len(event))
        framed = f"{len(part):x}\r\n".encode() + part + b"\r\n"
        with self.lock:
            self.floods_started += 1
            self.lock.notify_all()
        try:
            sock.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            while True:
                sock.sendall(framed)
        except OSError:
            pass
        finally:
            with self.lock:
                self.floods_ended += 1
                self.lock.notify_all()

    def wait(self, started: int = 0, ended: int = 0, timeout: float = 5.0) -> bool:
        with self.lock:
            return self.lock.wait_for(
                lambda: self.floods_started >= started and self.floods_ended >= ended, timeout
            )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flood_upstream() -> Iterator[FloodUpstream]:
    upstream = FloodUpstream()
    try:
        yield upstream
    finally:
        upstream.close()


STREAM_ROUTES = {
    "pass-through": ("GET", "/v1/files/flood/content", []),
    "chat-pass-through": ("POST", "/v1/chat/completions", []),
    "compacting": ("POST", "/v1/chat/completions", [("X-Session-Id", "flood-1")]),
}


@pytest.mark.parametrize("route", list(STREAM_ROUTES))
def test_a_client_that_never_reads_a_stream_gives_its_upstream_connection_back(
    flood_upstream: FloodUpstream, spawn_proxy: SpawnProxy, route: str
) -> None:
    proxy = spawn_proxy(
        upstream=flood_upstream.url, max_upstream_connections=1, pool_timeout=0.5, send_timeout=1
    )
    method, target, headers = STREAM_ROUTES[route]
    body = json.dumps(CHAT | {"stream": True}).encode() if method == "POST" else None
    head = request_bytes(
        method, target, [("X-Flood", "1"), ("Content-Type", "application/json"), *headers], body
    )
    reader = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        reader.connect(("127.0.0.1", proxy.port))
        reader.sendall(head)  # ... and never read the answer
        assert flood_upstream.wait(started=1)
        stalled = time.monotonic()
        # The one pooled connection is the flood's until the proxy gives up on this client.
        answered = None
        while time.monotonic() - stalled < 8:
            answered = httpx.get(proxy.base_url + "/models", timeout=5)
            if answered.status_code == 200:
                break
            time.sleep(0.1)
        assert answered is not None and answered.status_code == 200, answered
        assert time.monotonic() - stalled < 5.0
        assert flood_upstream.wait(ended=1)  # the upstream request was closed
        # What the proxy had sent is still readable, and then the connection ends.
        reader.settimeout(5)
        received = 0
        while chunk := reader.recv(1 << 20):
            received += len(chunk)
        assert received > 0
    finally:
        reader.close()
    assert b"Traceback" not in proxy.logs()


# -- 7. optional whitespace around header values ---------------------------------------------


def test_header_values_with_surrounding_whitespace_are_stripped(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()
    padded = [("X-Foo", "bar "), ("User-Agent", "curl/8 "), ("X-Tab", "\tkept\t")]
    answer = raw_request(proxy.port, request_bytes("GET", "/v1/models", padded))
    assert answer.status == 200, answer
    body = json.dumps(CHAT).encode()
    for extra in ([], [("X-Session-Id", "padded-1 ")]):
        headers = [*padded, ("Content-Type", "application/json"), *extra]
        answer = raw_request(
            proxy.port, request_bytes("POST", "/v1/chat/completions", headers, body)
        )
        assert answer.status == 200, answer
    for seen in fake_upstream.requests:
        assert seen.headers["x-foo"] == "bar"
        assert seen.headers["user-agent"] == "curl/8"
        assert seen.headers["x-tab"] == "kept"


# -- 8. duplicated credential headers --------------------------------------------------------


@pytest.mark.parametrize("name", ["Authorization", "x-api-key", "api-key"])
@pytest.mark.parametrize(
    "route", ["pass-through", "chat-pass-through", "compacting", "messages", "count-tokens"]
)
def test_duplicated_credential_headers_get_400(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, name: str, route: str
) -> None:
    proxy = make_proxy(anthropic_base_url=fake_upstream.base_url)
    first, second = ("Bearer sk-first", "Bearer sk-second")
    twice = [(name, first), (name.upper(), second)]
    session = [("X-Session-Id", "dup-1")] if route in ("compacting", "messages") else []
    headers = [*twice, *session, ("Content-Type", "application/json")]
    target = {
        "chat-pass-through": "/v1/chat/completions",
        "compacting": "/v1/chat/completions",
        "messages": "/v1/messages",
        "count-tokens": "/v1/messages/count_tokens",
    }.get(route)
    if target is None:
        head = request_bytes("GET", "/v1/models", twice)
    else:
        head = request_bytes("POST", target, headers, json.dumps(CHAT).encode())
    answer = raw_request(proxy.port, head)
    assert answer.status == 400, answer
    if target is not None and target.startswith("/v1/messages"):  # Anthropic's error shape
        payload = json.loads(answer.body)
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
        assert name.lower() in payload["error"]["message"]
    else:
        error = answer.error()
        assert (error["type"], error["code"]) == ("invalid_request_error", "duplicate_header")
        assert error["param"] == name.lower()
    assert "sk-first" not in answer.body.decode() and "sk-second" not in answer.body.decode()
    assert answer.headers["x-should-retry"] == "false"
    assert fake_upstream.requests == []


# -- 9. the drain timeout before a response started ------------------------------------------


MESSAGES_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hello"}],
}
DRAIN_PATHS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "pass-through": ("/chat/completions", CHAT, {"authorization": "Bearer sk-drain"}),
    "compacting": (
        "/chat/completions",
        CHAT,
        {"authorization": "Bearer sk-drain", "x-session-id": "drain-late"},
    ),
    "messages": ("/messages", MESSAGES_BODY, {"x-api-key": "sk-ant", "x-session-id": "drain-m"}),
}


@pytest.fixture
def slow_upstream() -> Iterator[TimedUpstream]:
    """An upstream that waits 8 s before its status line: nothing of the answer has started."""
    upstream = TimedUpstream()
    upstream.stream = False
    upstream.header_delay = 8
    try:
        yield upstream
    finally:
        upstream.close()


@pytest.mark.parametrize("path", list(DRAIN_PATHS))
def test_drain_timeout_before_the_answer_started_is_a_503_in_the_apis_shape(
    slow_upstream: TimedUpstream, spawn_proxy: SpawnProxy, path: str
) -> None:
    anthropic = slow_upstream.url.removesuffix("/v1")
    proxy = spawn_proxy(upstream=slow_upstream.url, anthropic_upstream=anthropic, drain_timeout=1)
    route, body, headers = DRAIN_PATHS[path]
    with ThreadPoolExecutor(1) as pool:
        url = proxy.base_url + route
        pending = pool.submit(httpx.post, url, json=body, headers=headers, timeout=15)
        assert wait_until(lambda: slow_upstream.requests == 1, 5)
        signalled = time.monotonic()
        proxy.signal(signal.SIGTERM)
        answer = pending.result(timeout=15)
    assert time.monotonic() - signalled < 5.0  # the 1 s drain timeout, with 5x margin
    assert answer.status_code == 503, answer.text
    assert int(answer.headers["retry-after"]) >= 1
    assert answer.headers["connection"] == "close"
    assert answer.headers.get("x-should-retry") != "false"
    if path == "messages":  # Anthropic's error shape on its API
        payload = answer.json()
        assert payload["type"] == "error" and payload["error"]["type"] == "api_error"
    else:
        error = answer.json()["error"]
        assert set(error) == ERROR_FIELDS
        assert (error["type"], error["code"]) == ("server_error", "proxy_shutdown")
    assert proxy.wait(timeout=10) == 0
    assert b"Internal Server Error" not in proxy.logs()


# -- 10. encoded traversal in pass-through paths ---------------------------------------------


TRAVERSALS = [
    "/v1/%2e%2e%2f%2e%2e%2fadmin",
    "/v1/%2E%2E%2F%2E%2E%2Fadmin",
    "/v1/models/..%5c..%5cadmin",
    "/v1/models/..%5C",
    "/v1/models/..\\admin",
    "/v1/..;/admin",
    "/v1/models/..;x=1/admin",
    "/v1/models/.%2E/x",
    "/v1/models/%2e;/x",
    "/v1/models/%252e%252e%252fadmin",
    "/v1/models/x%2f..",
]


def test_encoded_dot_segments_are_refused_like_literal_ones(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()
    for target in TRAVERSALS:
        answer = raw_request(proxy.port, request_bytes("GET", target, []))
        assert answer.status == 400, (target, answer)
        assert answer.error()["code"] == "invalid_path", target
    assert fake_upstream.requests == []
    # Dots and escapes that are not whole segments still go upstream, as they are.
    passing = ["/v1/models/ft%3Agpt-4o%3Aorg", "/v1/models/a..b", "/v1/models/...", "/v1/a;b"]
    for target in passing:
        answer = raw_request(proxy.port, request_bytes("GET", target, []))
        assert answer.status in (200, 404), (target, answer)  # the upstream's own answer
    assert [r.path for r in fake_upstream.requests] == [
        "/v1/models/ft:gpt-4o:org",
        "/v1/models/a..b",
        "/v1/models/...",
        "/v1/a;b",
    ]


# -- 11. the key-less loopback admin: DNS rebinding and cross-site posts ---------------------


def test_keyless_admin_serves_loopback_host_names_only(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()  # loopback bind, no admin key
    for host in ("evil.example", "evil.example:8484", "127.0.0.1.evil.example", "10.0.0.1", ""):
        for route in ("/admin/sessions", "/admin/", "/admin/openapi.json"):
            head = request_bytes("GET", route, []).replace(
                b"Host: 127.0.0.1\r\n", f"Host: {host}\r\n".encode()
            )
            answer = raw_request(proxy.port, head)
            assert answer.status == 403, (host, route, answer)
            error = answer.error()
            assert (error["type"], error["code"]) == ("permission_error", "admin_host_refused")
    for host in (
        "localhost",
        "LOCALHOST:8484",
        "127.0.0.1",
        f"127.0.0.1:{proxy.port}",
        "[::1]",
        "[::1]:80",
    ):
        answer = httpx.get(proxy.url + "/admin/sessions", headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)
    # Model routes are not admin: any Host is served there.
    assert (
        httpx.get(proxy.base_url + "/models", headers={"Host": "evil.example"}).status_code == 200
    )


def test_with_a_key_admin_takes_any_host(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(admin_key="k-admin")
    headers = {"Host": "proxy.internal.example", "Authorization": "Bearer k-admin"}
    assert httpx.get(proxy.url + "/admin/sessions", headers=headers).status_code == 200


@pytest.mark.parametrize("admin_key", [None, "k-admin"])
def test_admin_posts_need_a_json_content_type(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, admin_key: str | None
) -> None:
    proxy = make_proxy(admin_key=admin_key)
    auth = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
    url = proxy.url + "/admin/sessions/0123456789abcdef0123456789abcdef/compact"
    body = b'{"mode": "toolcall"}'
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        None,
    ):
        headers = {**auth, "Content-Type": content_type} if content_type else auth
        answer = httpx.post(url, content=body, headers=headers)
        assert answer.status_code == 415, (content_type, answer.text)
        error = answer.json()["error"]
        assert set(error) == ERROR_FIELDS and error["code"] == "unsupported_media_type"
    for content_type in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
        answer = httpx.post(url, content=body, headers={**auth, "Content-Type": content_type})
        assert answer.status_code == 404, (content_type, answer.text)  # no such session
        assert answer.json()["error"]["code"] == "session_not_found"
