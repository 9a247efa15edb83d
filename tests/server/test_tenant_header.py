"""`session.tenant_header`: a stable tenant from a header the operator names, so a rotated
credential keeps its sessions; off by default, when the credential alone is the tenant.

Through real uvicorn with the official `anthropic` SDK, as Claude Code talks to the proxy: an
OAuth token (`Authorization: Bearer`) that refreshes between two turns of one
`x-claude-code-session-id`, with the header sent as `ANTHROPIC_CUSTOM_HEADERS` would add it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from proxy.server.app import create_app
from proxy.session.identity import tenant_of
from proxy.settings import ConfigError, load_settings
from tests.support.claude_checks import messages_settings
from tests.support.fake_messages import FakeMessages, Turn
from tests.support.servers import UvicornThread

MODEL = "claude-opus-4-8"
SESSION = "cc-rotating-1"
FIRST = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture
def fake(server: FakeMessages) -> FakeMessages:
    server.reset()
    return server


def turn(url: str, token: str, messages: list[Any], tenant: str | None) -> str:
    """One turn under `token`; the `x-xun-session` the proxy answered with."""
    headers = {"x-claude-code-session-id": SESSION}
    if tenant is not None:
        headers["X-Xun-Tenant"] = tenant
    with anthropic.Anthropic(
        base_url=url, auth_token=token, max_retries=0, default_headers=headers
    ) as client:
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=64, messages=messages
        )
    raw.parse()
    return raw.headers["x-xun-session"]


def two_turns(
    fake: FakeMessages, tenant: str | None, second_tenant: str | None = None, **settings: Any
) -> tuple[str, str, list[dict[str, Any]]]:
    """A turn under one OAuth token, the next under its refreshed successor; both sessions'
    ids and the admin API's list of sessions."""
    fake.push_turns(Turn.text("Hello."), Turn.text("Hello again."))
    app = create_app(messages_settings(fake, **settings))
    with UvicornThread(app) as running:
        first = turn(running.url, "oauth-token-before", FIRST, tenant)
        history = [*FIRST, {"role": "assistant", "content": "Hello."}]
        history.append({"role": "user", "content": "Once more."})
        tenant_after = tenant if second_tenant is None else second_tenant
        second = turn(running.url, "oauth-token-after-refresh", history, tenant_after)
        running.settle()
        listed = httpx.get(running.url + "/admin/sessions").json()["data"]
        details = [httpx.get(f"{running.url}/admin/sessions/{s['id']}").json() for s in listed]
    return first, second, details


def test_with_a_tenant_header_a_rotated_token_keeps_its_session(fake: FakeMessages) -> None:
    first, second, sessions = two_turns(fake, "org-alice", tenant_header="X-Xun-Tenant")
    assert first == second
    assert len(sessions) == 1 and len(sessions[0]["turns"]) == 2
    assert sessions[0]["tenant"] == tenant_of({"x-xun-tenant": "org-alice"}, "x-xun-tenant")


def test_without_the_option_a_rotated_token_starts_over(fake: FakeMessages) -> None:
    first, second, sessions = two_turns(fake, "org-alice")
    assert first != second
    assert sorted(len(s["turns"]) for s in sessions) == [1, 1]


def test_the_tenant_header_keeps_two_tenants_apart(fake: FakeMessages) -> None:
    first, second, sessions = two_turns(
        fake, "org-alice", second_tenant="org-mallory", tenant_header="X-Xun-Tenant"
    )
    assert first != second
    assert sorted(len(s["turns"]) for s in sessions) == [1, 1]


def test_a_request_without_the_header_keeps_its_credential_tenant(fake: FakeMessages) -> None:
    first, second, _ = two_turns(fake, None, tenant_header="X-Xun-Tenant")
    assert first != second  # no header: the tokens decide, as without the option


def test_tenant_tags_never_meet_credential_tags() -> None:
    by_header = tenant_of({"x-xun-tenant": "sk-a"}, "X-Xun-Tenant")
    assert by_header not in (tenant_of({"authorization": "sk-a"}), tenant_of("sk-a"))
    assert tenant_of({"authorization": "sk-a", "x-xun-tenant": "t"}) == tenant_of("sk-a")
    assert tenant_of({"authorization": "sk-a", "x-xun-tenant": ""}, "x-xun-tenant") == tenant_of(
        "sk-a"
    )


@pytest.mark.parametrize(
    ("source", "value"),
    [("env", "X-Org-Id"), ("flag", "x-org-id"), ("env", " X-Org-Id ")],
)
def test_the_setting_reads_from_flag_and_env(source: str, value: str) -> None:
    if source == "env":
        settings = load_settings(env={"XUN_TENANT_HEADER": value})
    else:
        settings = load_settings({"tenant_header": value}, env={})
    assert settings.tenant_header is not None
    assert settings.tenant_header.lower() == "x-org-id"
    assert load_settings(env={}).tenant_header is None  # off by default


@pytest.mark.parametrize("value", ["bad header", "Authorization", "x-api-key", ""])
def test_a_bad_tenant_header_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"session\.tenant_header"):
        load_settings(env={"XUN_TENANT_HEADER": value})
