"""Fixtures shared by the app tests: the fake upstream, running proxies, SDK clients.

def test_x(fake_upstream, make_proxy, openai_client):
    proxy = make_proxy(token_threshold=8000)          # real uvicorn, memory:// store
    client = openai_client(proxy, session="s1")       # official SDK, no retries
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from starlette.applications import Starlette

from proxy.server.app import create_app
from proxy.settings import Settings
from proxy.upstream.client import Pool
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import UvicornThread

# Every HTTP client a test opens must be closed by the end of that test (see the module);
# pytester runs that guard on a suite of its own.
pytest_plugins = ["tests.support.open_clients", "pytester"]


@dataclass
class RunningProxy:
    """A proxy app served by uvicorn on a free loopback port."""

    app: Starlette
    settings: Settings
    server: UvicornThread
    create_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def base_url(self) -> str:
        """What a client's OPENAI_BASE_URL would be."""
        return self.server.url + "/v1"

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        self.server.stop()

    def settle(self) -> None:
        """Wait until the proxy's saves have landed (see `UvicornThread.settle`)."""
        self.server.settle()

    def restart(self) -> RunningProxy:
        """Stop, then serve a fresh app with the same settings on the same port."""
        self.stop()
        self.app = create_app(self.settings, **self.create_kwargs)
        self.server = UvicornThread(self.app, port=self.server.port).start()
        return self


MakeProxy = Callable[..., RunningProxy]


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def proxy_settings(fake: FakeUpstream | None, **overrides: Any) -> Settings:
    """Settings for a test proxy: the fake upstream and a memory store unless overridden."""
    # The seed's compactor unless a test asks otherwise: most app tests check its exact rules
    # (keep 12, escalate after two rounds); the cost-aware default has its own tests.
    # Summaries at the crossing turn, not written ahead, unless a test asks (the tests of
    # summaries prepared ahead: tests/turn/test_summary_ahead.py): a test's turn decides.
    values: dict[str, Any] = {"store_url": "memory://", "compactor": "seed", "summary_ahead": False}
    if fake is not None:
        values["upstream_base_url"] = fake.url
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def make_proxy(fake_upstream: FakeUpstream) -> Iterator[MakeProxy]:
    """`make_proxy(**settings_overrides, store=None, pool=None) -> RunningProxy`."""
    running: list[RunningProxy] = []

    def make(
        *,
        store: Any = None,
        pool: Pool | None = None,
        **overrides: Any,
    ) -> RunningProxy:
        settings = proxy_settings(fake_upstream, **overrides)
        kwargs: dict[str, Any] = {"store": store, "pool": pool}
        app = create_app(settings, **kwargs)
        proxy = RunningProxy(app, settings, UvicornThread(app).start(), kwargs)
        running.append(proxy)
        return proxy

    yield make
    for proxy in running:
        proxy.stop()


OpenAIClientFactory = Callable[..., openai.OpenAI]


@pytest.fixture
def openai_client() -> Iterator[OpenAIClientFactory]:
    """`openai_client(proxy, session="s1", api_key=..., **kwargs)`: a sync SDK client with
    the session header set (`session=None` for none) and retries off, closed at teardown."""
    clients: list[openai.OpenAI] = []

    def make(
        proxy: RunningProxy,
        session: str | None = "s1",
        api_key: str = "sk-test-a",
        **kwargs: Any,
    ) -> openai.OpenAI:
        headers = dict(kwargs.pop("default_headers", {}))
        if session is not None:
            headers.setdefault("X-Session-Id", session)
        kwargs.setdefault("max_retries", 0)
        client = openai.OpenAI(
            base_url=proxy.base_url, api_key=api_key, default_headers=headers, **kwargs
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
