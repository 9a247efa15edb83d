"""create_app: the compactor setting, the chat route fallback, lifespan ownership, access log."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.compact import AutoCompactor, placeholder_for
from proxy.compaction.cache_aware import CacheAwareCompactor
from proxy.server.app import create_app, load_compactor
from proxy.settings import ConfigError, Settings
from tests.conftest import MakeProxy
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import UvicornThread

STRATEGY = '''
from proxy.compact import CompactionReport, CompactorAbstract


class ReclaimEverything(CompactorAbstract):
    """Reclaims every tool result but the newest `toolcall_keep_max`, whatever the size."""

    runs = 0

    def __init__(self, toolcall_keep_max: int) -> None:
        self.keep = toolcall_keep_max

    async def auto_compact(self, agent):
        type(self).runs += 1
        result = agent.conversation.compact_toolcall(keep_max=self.keep)
        level = "toolcall" if result.reclaimed_count else "none"
        return CompactionReport(level, toolcall_results=[result])


class NotAStrategy:
    pass
'''


@pytest.fixture
def strategy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"xun_test_strategies_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(STRATEGY))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_seed_compactor_takes_the_configured_fields() -> None:
    settings = Settings(
        compactor="seed",
        toolcall_keep_max=3,
        summary_keep_max=5,
        escalation_rounds=1,
        max_retries=0,
    )
    compactor = load_compactor(settings)
    assert compactor == AutoCompactor(
        toolcall_keep_max=3, summary_keep_max=5, escalation_rounds=1, max_retries=0
    )


def test_the_default_is_the_cost_aware_compactor() -> None:
    # Chosen by the token-economy benchmark (BENCHMARKS.md): never costlier than direct.
    compactor = load_compactor(Settings(toolcall_keep_max=7))
    assert compactor == CacheAwareCompactor(toolcall_keep_max=7)


def test_custom_compactor_by_import_path_runs(
    strategy_module: str, fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    proxy = make_proxy(
        compactor=f"{strategy_module}:ReclaimEverything", token_threshold=10, toolcall_keep_max=1
    )
    compactor: Any = proxy.app.state.compactor
    assert type(compactor).__name__ == "ReclaimEverything" and compactor.keep == 1
    call = {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    call_b = call | {"id": "call_b"}
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read two files"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_a", "content": "A" * 400},
        {"role": "assistant", "content": None, "tool_calls": [call_b]},
        {"role": "tool", "tool_call_id": "call_b", "content": "B" * 400},
    ]
    headers = {"x-session-id": "custom", "authorization": "Bearer sk-test"}
    body = {"model": "gpt-4o", "messages": messages}
    for _ in range(2):
        response = httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
        assert response.status_code == 200
    assert type(compactor).runs >= 1
    sent = fake_upstream.chat_requests[-1].json["messages"]
    tool_contents = [m["content"] for m in sent if m["role"] == "tool"]
    assert tool_contents == [placeholder_for("call_a"), "B" * 400]
    assert response.headers["x-xun-compaction"] in ("toolcall", "none")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_for_xun:Thing", "cannot import no_such_module_for_xun:Thing"),
        ("{module}:Missing", "cannot import {module}:Missing"),
        ("{module}:NotAStrategy", "{module}:NotAStrategy is not a CompactorAbstract"),
    ],
)
def test_bad_compactor_is_a_config_error(strategy_module: str, path: str, message: str) -> None:
    settings = Settings(compactor=path.format(module=strategy_module))
    with pytest.raises(ConfigError) as exc:
        create_app(settings)
    (line,) = exc.value.lines
    assert line.startswith("auto_compact.compactor: " + message.format(module=strategy_module))


class CountingStore:
    def __init__(self) -> None:
        self.closed = 0

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self.closed += 1


def test_lifespan_owns_upstream_and_only_its_own_store(monkeypatch: pytest.MonkeyPatch) -> None:
    injected = CountingStore()
    app = create_app(Settings(store_url="memory://"), store=injected)  # type: ignore[arg-type]
    with UvicornThread(app):
        assert app.state.store is injected
        upstream = app.state.upstream
    assert injected.closed == 0 and upstream.closed

    opened = CountingStore()
    monkeypatch.setattr("proxy.server.app.open_store", lambda url, **kwargs: opened)
    app = create_app(Settings(store_url="memory://", session_max_bytes=123))
    with UvicornThread(app):
        assert app.state.store is opened
    assert opened.closed == 1


def test_access_line_keeps_route_fields_and_derives_proxy_ms(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy")
    proxy = make_proxy()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-session-id": "logged", "authorization": "Bearer sk-live-SECRET"}
    assert httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers).is_success
    proxy.stop()
    (line,) = [r for r in caplog.records if r.name == "proxy.access"]
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["path"] == "/v1/chat/completions" and fields["status"] == 200
    assert fields["session"] and fields["tenant"] and fields["model"] == "gpt-4o"
    assert 0 <= fields["proxy_ms"] <= fields["duration_ms"]  # upstream_ms comes from the route
    assert "SECRET" not in caplog.text
