"""Anthropic's requests go to Anthropic on every `/v1/...` path, and no credential header
reaches the other provider (issue 26, item 2).

Two fakes, both under real uvicorn: the OpenAI upstream (`--upstream`) and the Anthropic one
(`--anthropic-upstream`); the official `anthropic` and `openai` SDKs drive the proxy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.upstream.providers import foreign_credentials, is_anthropic
from tests.conftest import MakeProxy, OpenAIClientFactory, RunningProxy
from tests.support.fake_messages import ANTHROPIC_MODELS, FakeMessages
from tests.support.fake_upstream import FakeUpstream

OPERATOR_KEY = "sk-operator-secret"
ANTHROPIC_KEY = "sk-ant-client-key"
ANTHROPIC = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
CHAT: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def fake_messages() -> Iterator[FakeMessages]:
    with FakeMessages() as fake:
        yield fake


@pytest.fixture(params=[None, OPERATOR_KEY], ids=["client-key", "operator-key"])
def proxy(
    request: pytest.FixtureRequest, make_proxy: MakeProxy, fake_messages: FakeMessages
) -> RunningProxy:
    return make_proxy(upstream_api_key=request.param, anthropic_base_url=fake_messages.base_url)


def credentials(headers: dict[str, str]) -> dict[str, str]:
    names = ("authorization", "x-api-key", "api-key")
    return {name: headers[name] for name in names if name in headers}


def test_the_anthropic_sdk_lists_models_at_anthropic(
    proxy: RunningProxy, fake_upstream: FakeUpstream, fake_messages: FakeMessages
) -> None:
    client = anthropic.Anthropic(base_url=proxy.url, api_key=ANTHROPIC_KEY, max_retries=0)
    listed = client.models.list()
    assert [model.id for model in listed.data] == list(ANTHROPIC_MODELS)
    assert listed.data[0].type == "model"
    client.close()
    assert fake_upstream.requests == []
    (seen,) = fake_messages.requests
    assert seen.path == "/v1/models"
    # The SDK's own credential header (this version sends a bearer token), never the operator's.
    assert list(credentials(seen.headers).values()) in (
        [ANTHROPIC_KEY],
        [f"Bearer {ANTHROPIC_KEY}"],
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models/claude-sonnet-4-5-20250929"),
        ("GET", "/v1/files"),
        ("POST", "/v1/complete"),
        ("GET", "/v1/skills"),
        ("GET", "/v1/organizations/me/api_keys"),
        ("POST", "/v1/messages/batches"),
    ],
)
@pytest.mark.parametrize("marker", ["x-api-key", "anthropic-version", "anthropic-beta"])
def test_every_v1_path_with_an_anthropic_header_goes_to_anthropic(
    proxy: RunningProxy,
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    method: str,
    path: str,
    marker: str,
) -> None:
    values = {
        "x-api-key": ANTHROPIC_KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "files-api-2025-04-14",
    }
    headers = {marker: values[marker], "content-type": "application/json"}
    if marker != "x-api-key":
        headers["authorization"] = "Bearer sk-ant-oat-token"  # Claude Code's OAuth login
    httpx.request(method, proxy.url + path, headers=headers, json={} if method == "POST" else None)
    assert fake_upstream.requests == []
    (seen,) = fake_messages.requests
    assert (seen.method, seen.path) == (method, path)
    expected = {"x-api-key": ANTHROPIC_KEY} if marker == "x-api-key" else {}
    if marker != "x-api-key":
        expected["authorization"] = "Bearer sk-ant-oat-token"
    assert credentials(seen.headers) == expected  # never the operator's key


def test_an_openai_request_keeps_to_the_openai_upstream(
    proxy: RunningProxy,
    fake_upstream: FakeUpstream,
    fake_messages: FakeMessages,
    openai_client: OpenAIClientFactory,
) -> None:
    client = openai_client(proxy, session=None, api_key="sk-openai-client")
    assert client.models.list().data
    assert client.chat.completions.create(**CHAT).choices
    assert fake_messages.requests == []
    expected = "Bearer " + (proxy.settings.upstream_api_key_value or "sk-openai-client")
    assert [credentials(r.headers) for r in fake_upstream.requests] == [
        {"authorization": expected}
    ] * 2


def test_an_openai_key_never_goes_to_anthropic(
    proxy: RunningProxy, fake_upstream: FakeUpstream, fake_messages: FakeMessages
) -> None:
    """`/v1/messages/...` is Anthropic's path; a call there without Anthropic's headers
    reaches it without the OpenAI credentials it carried."""
    headers = {"authorization": "Bearer sk-openai-client", "api-key": "azure-key"}
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(proxy.url + "/v1/messages/count_tokens", json=body, headers=headers)
    (seen,) = fake_messages.requests
    assert seen.path == "/v1/messages/count_tokens"
    assert credentials(seen.headers) == {}
    assert fake_upstream.requests == []


def test_the_model_routes_follow_the_headers_too(
    proxy: RunningProxy, fake_upstream: FakeUpstream, fake_messages: FakeMessages
) -> None:
    """Anthropic's API answers `/v1/chat/completions` too (its OpenAI compatibility): an
    Anthropic-keyed call there goes to Anthropic, compacted or not."""
    for session in ({}, {"X-Session-Id": "routed-1"}):
        headers = {**ANTHROPIC, **session}
        answer = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT, headers=headers)
        assert answer.status_code == 200, answer.text
    assert fake_upstream.requests == []
    assert [credentials(r.headers) for r in fake_messages.requests] == [
        {"x-api-key": ANTHROPIC_KEY}
    ] * 2


def test_the_credential_rules() -> None:
    assert is_anthropic({"anthropic-version"}) and is_anthropic(httpx.Headers({"X-Api-Key": "k"}))
    assert not is_anthropic({"authorization", "api-key"})
    assert foreign_credentials("openai", {"authorization"}) == {"x-api-key"}
    assert foreign_credentials("anthropic", {"x-api-key"}) == {"api-key"}
    assert foreign_credentials("anthropic", {"authorization"}) == {"api-key", "authorization"}
