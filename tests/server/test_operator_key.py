"""The operator's key (`--upstream-api-key`) is spent only by local clients, not web pages.

Issue 26, item 1: with a key of the proxy's own, a `Host` that is not loopback (nor given
with `--allowed-host`), a foreign `Origin`, or a model route's body that is not JSON is
refused in the API's own error shape, and nothing reaches the upstream. Without a key,
nothing changes. Item 9: the host names are parsed exactly (`proxy.setting_values`), for these
checks and the key-less admin API alike. Real uvicorn, the official SDKs, the fake upstreams.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.setting_values import allowed_host, allowed_origin, host_name, normalise_names
from tests.conftest import MakeProxy, OpenAIClientFactory, RunningProxy
from tests.support.fake_messages import FakeMessages
from tests.support.fake_upstream import FakeUpstream

OPERATOR_KEY = "sk-operator-secret"
CHAT: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}
ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-client", "anthropic-version": "2023-06-01"}


@pytest.fixture
def fake_messages() -> Iterator[FakeMessages]:
    with FakeMessages() as fake:
        yield fake


def keyed(make_proxy: MakeProxy, fake_messages: FakeMessages, **overrides: Any) -> RunningProxy:
    return make_proxy(
        upstream_api_key=OPERATOR_KEY, anthropic_base_url=fake_messages.base_url, **overrides
    )


def openai_error(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# -- item 1, through the SDKs ------------------------------------------------------------


def test_a_local_sdk_client_spends_the_operator_key(
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    for session in ("op-1", None):  # compacting and passed through
        reply = openai_client(proxy, session=session).chat.completions.create(**CHAT)
        assert reply.choices[0].message.content
    models = openai_client(proxy, session=None).models.list()
    assert models.data
    seen = fake_upstream.requests
    assert len(seen) == 3
    assert all(r.headers["authorization"] == f"Bearer {OPERATOR_KEY}" for r in seen)


@pytest.mark.parametrize("origin", ["http://attacker.example", "null", "http://127.0.0.1.evil"])
def test_the_sdks_get_a_403_for_a_foreign_origin(
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    origin: str,
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    client = openai_client(proxy, default_headers={"Origin": origin})
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client.chat.completions.create(**CHAT)
    assert raised.value.status_code == 403 and raised.value.code == "origin_not_allowed"
    with pytest.raises(openai.PermissionDeniedError):
        client.models.list()
    claude = anthropic.Anthropic(
        base_url=proxy.url, api_key="sk-ant-client", default_headers={"Origin": origin}
    )
    with pytest.raises(anthropic.PermissionDeniedError) as denied:
        claude.messages.create(**MESSAGE)
    body = denied.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "permission_error"
    claude.close()
    assert fake_upstream.requests == [] and fake_messages.requests == []


def test_a_local_origin_and_no_origin_are_served(
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    for origin in ("http://localhost:3000", "http://127.0.0.1:8484", "https://[::1]"):
        client = openai_client(proxy, session=None, default_headers={"Origin": origin})
        assert client.chat.completions.create(**CHAT).choices
    claude = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    assert claude.messages.create(**MESSAGE).content
    claude.close()
    assert len(fake_upstream.requests) == 3 and len(fake_messages.messages_requests) == 1


# -- item 1, the browser's requests byte for byte -----------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("GET", "/v1/files/file-abc/content"),
        ("GET", "/v1/responses/resp_1"),
        ("GET", "/v1/vector_stores"),
        ("GET", "/v1/models"),
    ],
)
def test_a_rebound_host_name_never_spends_the_key(
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    make_proxy: MakeProxy,
    method: str,
    path: str,
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    for host in ("rebind.attacker.example", f"rebind.attacker.example:{proxy.port}", "[::1].evil"):
        headers = {"Host": host, "Content-Type": "application/json"}
        answer = httpx.request(method, proxy.url + path, headers=headers, json=CHAT)
        assert answer.status_code == 403, (host, answer.text)
        error = openai_error(answer)
        assert (error["type"], error["code"]) == ("permission_error", "host_not_allowed")
        assert OPERATOR_KEY not in answer.text
    assert fake_upstream.requests == []


def test_a_cross_site_text_plain_post_gets_a_415(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    data = json.dumps(CHAT)
    for path in ("/v1/chat/completions", "/v1/responses"):
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            answer = httpx.post(proxy.url + path, content=data, headers={"Content-Type": kind})
            assert answer.status_code == 415, (path, kind)
            error = openai_error(answer)
            assert (error["code"], error["param"]) == ("unsupported_media_type", "content-type")
        answer = httpx.post(proxy.url + path, content=data)  # no Content-Type at all
        assert answer.status_code == 415
    messages = httpx.post(
        proxy.url + "/v1/messages",
        content=json.dumps(MESSAGE),
        headers={"Content-Type": "text/plain", **ANTHROPIC_HEADERS},
    )
    assert messages.status_code == 415
    assert messages.json()["type"] == "error"  # Anthropic's shape
    assert messages.json()["error"]["type"] == "invalid_request_error"
    assert fake_upstream.requests == [] and fake_messages.requests == []
    # Refused requests are counted under their route's wire.
    metrics = httpx.get(proxy.url + "/metrics").text
    for wire in ("chat", "responses", "messages"):
        assert re.search(rf'xun_requests_total{{[^}}]*status="415"[^}}]*wire="{wire}"', metrics)
    # JSON with a charset is JSON.
    typed = {"Content-Type": "Application/JSON; charset=utf-8"}
    assert httpx.post(proxy.base_url + "/chat/completions", content=data, headers=typed).is_success


def test_allowed_host_names_are_served(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy
) -> None:
    proxy = keyed(make_proxy, fake_messages, allowed_hosts=("xun-proxy", "Proxy.Internal"))
    for host in ("xun-proxy", "xun-proxy:8484", "proxy.internal", "PROXY.INTERNAL:80"):
        headers = {"Host": host, "Origin": f"http://{host}"}
        answer = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers=headers)
        assert answer.status_code == 200, (host, answer.text)
    for host in ("xun-proxy.evil", "evil.xun-proxy", "proxy.internal.attacker.example"):
        answer = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers={"Host": host})
        assert answer.status_code == 403, host
    assert len(fake_upstream.requests) == 4


def test_health_probes_take_any_host_name(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    for route in ("/healthz", "/readyz", "/metrics"):
        answer = httpx.get(proxy.url + route, headers={"Host": "10.1.2.3:8484"})
        assert answer.status_code == 200, route


def test_without_an_operator_key_nothing_changes(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(anthropic_base_url=fake_messages.base_url)
    headers = {
        "Host": "rebind.attacker.example",
        "Origin": "http://attacker.example",
        "Content-Type": "text/plain",
        "Authorization": "Bearer sk-client",
    }
    answer = httpx.post(
        proxy.base_url + "/chat/completions", content=json.dumps(CHAT), headers=headers
    )
    assert answer.status_code == 200
    assert fake_upstream.requests[-1].headers["authorization"] == "Bearer sk-client"


# -- item 9: one exact host parser ---------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST:8484",
        "127.0.0.1",
        "127.0.0.1:8484",
        "127.9.8.7:1",
        "[::1]",
        "[::1]:8484",
        "[0:0:0:0:0:0:0:1]:80",
    ],
)
def test_loopback_host_names(host: str) -> None:
    assert allowed_host(host)


@pytest.mark.parametrize(
    "host",
    [
        "[::1].evil.com",
        "[::1].evil.com:80",
        "[::1]:80.evil.com",
        "[::1]x",
        "[::1]:",
        "[::1",
        "::1",
        "127.0.0.1.evil.com",
        "127.0.0.1:80:80",
        "localhost.evil.com",
        "evil-localhost",
        "localhost:",
        "localhost:http",
        "localhost:123456",
        "local host",
        "127.1",
        "0x7f.0.0.1",
        "127.000.0.1",
        "[::ffff:127.0.0.1]",
        "10.0.0.1",
        "0.0.0.0",
        "",
    ],
)
def test_everything_else_is_refused(host: str) -> None:
    assert not allowed_host(host)


def test_configured_names_match_any_case_and_port_only_whole() -> None:
    allowed = normalise_names(["Proxy.Internal", " xun-proxy ", "[FD00::1]", "10.1.2.3"])
    assert allowed == ("proxy.internal", "xun-proxy", "[fd00::1]", "10.1.2.3")
    for host in ("proxy.internal:443", "XUN-PROXY", "[fd00::1]:8484", "10.1.2.3:1"):
        assert allowed_host(host, allowed), host
    for host in ("proxy.internal.evil", "a.proxy.internal", "[fd00::2]", "10.1.2.33"):
        assert not allowed_host(host, allowed), host
    assert host_name("[::1].evil.com") is None
    for bad in ("a:80", "fd00::1", "[::1]:80", "a b", "", "http://a"):
        with pytest.raises(ValueError, match="not a host name"):
            normalise_names([bad])


def test_origins_are_judged_by_their_host() -> None:
    assert allowed_origin("http://localhost:3000")
    assert allowed_origin("https://[::1]:8443")
    assert allowed_origin("http://proxy.internal", ("proxy.internal",))
    for origin in ("null", "http://attacker.example", "http://[::1].evil", "localhost", ""):
        assert not allowed_origin(origin), origin
    assert not allowed_origin("http://user@localhost") and not allowed_origin("http://localhost/")


def test_the_keyless_admin_refuses_a_bracketed_prefix(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy()  # loopback bind, no admin key
    for host in ("[::1].evil.com", "[::1].evil.com:8484", "[::1]:80.evil.com"):
        answer = httpx.get(proxy.url + "/admin/sessions", headers={"Host": host})
        assert answer.status_code == 403, host
        assert openai_error(answer)["code"] == "admin_host_refused"
    assert httpx.get(proxy.url + "/admin/sessions", headers={"Host": "[::1]:8484"}).is_success
    named = make_proxy(allowed_hosts=("xun-proxy",))
    assert httpx.get(named.url + "/admin/sessions", headers={"Host": "xun-proxy"}).is_success


# -- issue 34, item 8: every POST under /v1/ needs JSON (multipart on upload routes) --------

# Routes the proxy only passes through, or a model route written another way: each took a
# text/plain or form body and spent the operator's key.
JSON_ONLY_POSTS = [
    "/v1/chat/completions/",
    "/v1/responses/",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/responses/compact",
    "/v1/responses/resp_1/cancel",
    "/v1/images/generations",
    "/v1/audio/speech",
    "/v1/moderations",
    "/v1/batches",
    "/v1/vector_stores",
    "/v1/messages/count_tokens",
    "/v1/messages/batches",
]
SIMPLE_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]


def post_as(proxy: RunningProxy, path: str, kind: str | None, body: bytes) -> httpx.Response:
    anthropic_side = path.startswith("/v1/messages")
    headers = dict(ANTHROPIC_HEADERS) if anthropic_side else {"Authorization": "Bearer sk-client"}
    if kind is not None:
        headers["Content-Type"] = kind
    return httpx.post(proxy.url + path, content=body, headers=headers)


@pytest.mark.parametrize("path", JSON_ONLY_POSTS)
def test_every_post_under_v1_needs_json(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy, path: str
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    body = json.dumps(CHAT).encode()
    for kind in SIMPLE_TYPES:
        answer = post_as(proxy, path, kind, body)
        assert answer.status_code == 415, (path, kind, answer.text)
        if path.startswith("/v1/messages/"):
            assert answer.json()["type"] == "error"  # Anthropic's shape
            assert answer.json()["error"]["type"] == "invalid_request_error"
            assert "application/json" in answer.json()["error"]["message"]
        else:
            error = openai_error(answer)
            assert (error["code"], error["param"]) == ("unsupported_media_type", "content-type")
            assert "application/json" in error["message"]
    assert fake_upstream.requests == [] and fake_messages.requests == []
    answer = post_as(proxy, path, "application/json", body)  # JSON still goes through
    assert answer.status_code != 415
    upstream = fake_messages if path.startswith("/v1/messages/") else fake_upstream
    assert len(upstream.requests) == 1


UPLOADS = [
    "/v1/files",
    "/v1/files/",
    "/v1/uploads/upload_1/parts",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/audio/voices",
    "/v1/audio/voice_consents",
    "/v1/images/edits",
    "/v1/images/variations",
    "/v1/videos",
    "/v1/videos/edits",
    "/v1/videos/extensions",
    "/v1/videos/characters",
    "/v1/containers/cntr_1/files",
    "/v1/skills",
    "/v1/skills/skill_1/versions",
    "/v1/content_provenance_checks",
    "/v1/realtime/calls",
]


@pytest.mark.parametrize("path", UPLOADS)
def test_upload_routes_take_multipart_and_json_only(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy, path: str
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    for kind in ("text/plain", "application/x-www-form-urlencoded", None):
        answer = post_as(proxy, path, kind, b"purpose=batch")
        assert answer.status_code == 415, (path, kind)
        error = openai_error(answer)
        assert error["code"] == "unsupported_media_type"
        assert "multipart/form-data" in error["message"]
    assert fake_upstream.requests == []
    multipart = httpx.post(
        proxy.url + path, files={"file": ("a.txt", b"hello")}, data={"purpose": "batch"}
    )
    assert multipart.status_code == 404  # the fake upstream has no such route: it got there
    [seen] = fake_upstream.requests
    assert seen.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert seen.headers["authorization"] == f"Bearer {OPERATOR_KEY}"


def test_the_sdks_uploads_still_spend_the_key(
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    client = openai_client(proxy, session=None)
    with pytest.raises(openai.NotFoundError):  # the fake upstream has no files route
        client.files.create(file=("notes.jsonl", b"{}\n"), purpose="batch")
    with pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(file=("a.wav", b"RIFF"), model="whisper-1")
    assert client.embeddings.create(model="text-embedding-3-small", input="hi").data
    with pytest.raises(openai.NotFoundError):  # a POST without a body: the SDK says JSON
        client.batches.cancel("batch_1")
    paths = [(r.path, r.headers["content-type"].split(";")[0]) for r in fake_upstream.requests]
    assert paths == [
        ("/v1/files", "multipart/form-data"),
        ("/v1/audio/transcriptions", "multipart/form-data"),
        ("/v1/embeddings", "application/json"),
        ("/v1/batches/batch_1/cancel", "application/json"),
    ]
    keys = {r.headers["authorization"] for r in fake_upstream.requests}
    assert keys == {f"Bearer {OPERATOR_KEY}"}


def test_realtime_calls_take_an_sdp_offer(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy
) -> None:
    proxy = keyed(make_proxy, fake_messages)
    offer = b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\n"
    answer = post_as(proxy, "/v1/realtime/calls", "application/sdp", offer)
    assert answer.status_code == 404  # passed through to the fake upstream
    assert post_as(proxy, "/v1/files", "application/sdp", offer).status_code == 415
    assert [r.path for r in fake_upstream.requests] == ["/v1/realtime/calls"]


# -- issue 34, item 9: a fully qualified name (trailing dot) is the same name ---------------


def test_a_trailing_dot_names_the_same_host(
    fake_upstream: FakeUpstream, fake_messages: FakeMessages, make_proxy: MakeProxy
) -> None:
    for host in ("localhost.", "LOCALHOST.:8484", "127.0.0.1.", "localhost.:1"):
        assert allowed_host(host), host
        assert allowed_origin(f"http://{host}"), host
    for host in ("localhost..", ".", "localhost.evil.com.", "localhost:80.", ".localhost"):
        assert not allowed_host(host), host
    assert normalise_names(["Proxy.Internal."]) == ("proxy.internal",)
    assert allowed_host("proxy.internal.:443", normalise_names(["proxy.internal"]))
    assert allowed_host("proxy.internal", normalise_names(["proxy.internal."]))

    proxy = keyed(make_proxy, fake_messages, allowed_hosts=("proxy.internal.",))
    for host in ("localhost.", f"localhost.:{proxy.port}", "proxy.internal.", "proxy.internal"):
        headers = {"Host": host, "Origin": f"http://{host}"}
        answer = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers=headers)
        assert answer.status_code == 200, (host, answer.text)
    keyless = make_proxy()  # loopback bind, no admin key: the admin API checks the Host
    answer = httpx.get(keyless.url + "/admin/sessions", headers={"Host": "localhost."})
    assert answer.status_code == 200, answer.text
