"""Configuration end to end: flag > env > YAML file > default for every setting, a custom
compactor loaded by import path and run through a real proxy, and the per-request headers
`X-Xun-Token-Threshold` and `X-Xun-Compact: off`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from proxy.compact import (
    AutoCompactor,
    CompactionAgent,
    CompactionReport,
    CompactorAbstract,
    placeholder_for,
)
from proxy.server.app import load_compactor
from proxy.setting_values import OPTIONS
from proxy.settings import ConfigError, load_settings
from proxy.turn.pipeline import MIN_HEADER_THRESHOLD
from tests.support.agent import Agent, ModelScript, model_requests
from tests.support.fake_upstream import FakeUpstream

ENV = {"XDG_STATE_HOME": "/state"}

# field: (YAML value, env string, flag value, then the expected file, env and flag results)
VALUES: dict[str, tuple[Any, str, Any, Any, Any, Any]] = {
    "anthropic_base_url": (
        "http://f", "http://e", "http://g", "http://f", "http://e", "http://g"
    ),
    "upstream_base_url": (
        "http://f/v1", "http://e/v1", "http://g/v1", "http://f/v1", "http://e/v1", "http://g/v1"
    ),
    "upstream_api_key": ("sk-f", "sk-e", "sk-g", "sk-f", "sk-e", "sk-g"),
    "anthropic_api_key": ("sk-ant-f", "sk-ant-e", "sk-ant-g", "sk-ant-f", "sk-ant-e", "sk-ant-g"),
    "connect_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "read_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "first_byte_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "idle_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "write_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "pool_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "max_upstream_connections": (11, "12", 13, 11, 12, 13),
    "host": ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.3"),
    "port": (1001, "1002", 1003, 1001, 1002, 1003),
    "drain_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "max_body_bytes": (1001, "1002", 1003, 1001, 1002, 1003),
    "body_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "send_timeout": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "workers": (2, "3", 4, 2, 3, 4),
    "allowed_hosts": (
        ["f.example"], "e.example, E2.example", ["g.example"],
        ("f.example",), ("e.example", "e2.example"), ("g.example",),
    ),
    "store_url": (
        "memory://", "sqlite:///e.db", "redis://r/0", "memory://", "sqlite:///e.db", "redis://r/0"
    ),
    "session_ttl_seconds": (11, "12", 13, 11, 12, 13),
    "session_max_bytes": (11, "12", 13, 11, 12, 13),
    "store_cache_entries": (11, "12", 13, 11, 12, 13),
    "store_cache_bytes": (11, "12", 13, 11, 12, 13),
    "token_threshold": (100, "200", 300, 100, 200, 300),
    "auto_compact_enabled": (False, "true", False, False, True, False),
    "mode": ("shadow", "compact", "shadow", "shadow", "compact", "shadow"),
    "summary_model": ("m-f", "m-e", "m-g", "m-f", "m-e", "m-g"),
    "summary_upstream": (
        "http://f/v1", "http://e/v1 ", "http://g/v1/", "http://f/v1", "http://e/v1", "http://g/v1",
    ),
    "summary_upstream_api_key": ("sk-s-f", "sk-s-e", "sk-s-g", "sk-s-f", "sk-s-e", "sk-s-g"),
    "summary_ahead": (False, "on", "off", False, True, False),
    "summary_ahead_connections": (3, "4", 5, 3, 4, 5),
    "shadow_budget": (1.5, "2.5", 3.5, 1.5, 2.5, 3.5),
    "adaptive_reclaim": (False, "on", "off", False, True, False),
    "toolcall_keep_max": (3, "4", 5, 3, 4, 5),
    "summary_keep_max": (6, "7", 8, 6, 7, 8),
    "tail_max_tokens": (6, "7", 8, 6, 7, 8),
    "escalation_rounds": (0, "1", 3, 0, 1, 3),
    "max_retries": (0, "1", 3, 0, 1, 3),
    "compactor": ("a.f:C", "a.e:C", "a.g:C", "a.f:C", "a.e:C", "a.g:C"),
    "max_extract_rounds": (1, "2", 3, 1, 2, 3),
    "extract_tool": (
        "after_compaction",
        "always",
        "after_compaction",
        "after_compaction",
        "always",
        "after_compaction",
    ),
    "context_windows": ({"m": 1}, '{"m": 2}', {"m": 3}, {"m": 1}, {"m": 2}, {"m": 3}),
    "cache_read_factors": ({"m": 0.1}, '{"m":0.2}', {"m":0.3}, {"m": 0.1}, {"m": 0.2}, {"m": 0.3}),
    "cache_write_factors": (
        {"m": 1.5},
        '{"m": {"1h": 2.5}}',
        {"m": {"5m": 1.1, "1h": 3}},
        {"m": 1.5},
        {"m": {"1h": 2.5}},
        {"m": {"5m": 1.1, "1h": 3.0}},
    ),
    "prices": (
        {"m": {"input": 1}},
        '{"m": {"input": 2, "output": 8}}',
        {"m": {"input": 3}},
        {"m": {"input": 1.0}},
        {"m": {"input": 2.0, "output": 8.0}},
        {"m": {"input": 3.0}},
    ),
    "cache_lifetimes": ({"m": 60}, '{"m": 120}', {"m": 30}, {"m": 60.0}, {"m": 120.0}, {"m": 30.0}),
    "admin_key": ("adm-f", "adm-e", "adm-g", "adm-f", "adm-e", "adm-g"),
    "session_headers": ("X-F", "X-E,X-E2", ["X-G"], ["X-F"], ["X-E", "X-E2"], ["X-G"]),
    "tenant_header": ("X-T-F", "X-T-E", "X-T-G", "X-T-F", "X-T-E", "X-T-G"),
    "log_level": ("error", "WARNING", "debug", "error", "warning", "debug"),
    "log_content": (True, "false", True, True, False, True),
    "log_format": ("json", "CONSOLE", "json", "json", "console", "json"),
}  # fmt: skip


def plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_every_setting_is_in_the_table() -> None:
    assert {option.field for option in OPTIONS} == set(VALUES)


@pytest.mark.parametrize("option", OPTIONS, ids=[option.field for option in OPTIONS])
def test_flag_beats_env_beats_file_beats_default(tmp_path: Path, option: Any) -> None:
    file_value, env_value, flag_value, from_file, from_env, from_flag = VALUES[option.field]
    section, name = option.key.split(".")
    config = tmp_path / "xun.yaml"
    config.write_text(yaml.safe_dump({section: {name: file_value}}))
    env = {**ENV, option.env: env_value}
    file_only = {"config_file": str(config)}

    def value(flags: dict[str, Any], environ: dict[str, str]) -> Any:
        return plain(getattr(load_settings(flags, env=environ), option.field))

    default = value({}, ENV)
    assert value(file_only, ENV) == from_file != default
    assert value(file_only, env) == from_env != from_file
    assert value({**file_only, option.field: flag_value}, env) == from_flag != from_env
    # Each layer also stands alone on top of the defaults.
    assert value({}, env) == from_env
    assert value({option.field: flag_value}, ENV) == from_flag


def test_config_file_named_by_env(tmp_path: Path) -> None:
    config = tmp_path / "xun.yaml"
    config.write_text("auto_compact:\n  toolcall_keep_max: 3\n  compactor: pkg.mod:Cls\n")
    settings = load_settings({}, env={**ENV, "XUN_CONFIG": str(config)})
    assert (settings.toolcall_keep_max, settings.compactor) == (3, "pkg.mod:Cls")


def test_auto_compactor_gets_the_configured_fields(tmp_path: Path) -> None:
    config = tmp_path / "xun.yaml"
    config.write_text(
        "auto_compact:\n  compactor: seed\n  toolcall_keep_max: 3\n  summary_keep_max: 5\n"
        "  escalation_rounds: 0\n"
    )
    env = {**ENV, "XUN_MAX_RETRIES": "4", "XUN_SUMMARY_KEEP_MAX": "9"}
    compactor = load_compactor(load_settings({"config_file": str(config)}, env=env))
    assert compactor == AutoCompactor(
        toolcall_keep_max=3, summary_keep_max=9, escalation_rounds=0, max_retries=4
    )


# -- a custom compactor --------------------------------------------------------------------


class KeepNewestCompactor(CompactorAbstract):
    """Reclaims every tool result but the newest `toolcall_keep_max`, whatever the size."""

    def __init__(self, toolcall_keep_max: int = 12) -> None:
        self.keep = toolcall_keep_max

    async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
        conv = agent.conversation
        result = conv.compact_toolcall(keep_max=self.keep)
        level = "toolcall" if result.reclaimed_count else "none"
        return CompactionReport(level, toolcall_results=[result], tokens_before=conv.total_tokens)


class AnyKwargsCompactor(KeepNewestCompactor):
    def __init__(self, **fields: Any) -> None:
        super().__init__(fields["toolcall_keep_max"])
        self.fields = fields


class NotACompactor:
    pass


def test_custom_compactor_by_import_path(tmp_path: Path) -> None:
    config = tmp_path / "xun.yaml"
    config.write_text(f"auto_compact:\n  compactor: {__name__}:KeepNewestCompactor\n")
    settings = load_settings({"config_file": str(config), "toolcall_keep_max": 2}, env=ENV)
    compactor = load_compactor(settings)
    assert isinstance(compactor, KeepNewestCompactor) and compactor.keep == 2
    settings = load_settings({"compactor": f"{__name__}:AnyKwargsCompactor"}, env=ENV)
    compactor = load_compactor(settings)
    assert isinstance(compactor, AnyKwargsCompactor)
    assert compactor.fields == {
        "toolcall_keep_max": 12,
        "summary_keep_max": 16,
        "tail_max_tokens": 3000,
        "escalation_rounds": 2,
        "max_retries": 2,
    }


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.no_such_module:X", "cannot import"),
        (f"{__name__}:Missing", "cannot import"),
        (f"{__name__}:NotACompactor", "is not a CompactorAbstract"),
    ],
)
def test_bad_compactor_paths_name_the_key(path: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_compactor(load_settings({"compactor": path}, env=ENV))
    assert exc.value.lines[0].startswith("auto_compact.compactor:") and message in str(exc.value)


def test_custom_compactor_runs_through_a_real_proxy(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    fake_upstream.default = ModelScript()
    proxy = make_proxy(
        compactor=f"{__name__}:KeepNewestCompactor", toolcall_keep_max=1, token_threshold=1000
    )
    agent = Agent(openai_client(proxy, session="custom"), output_size=1000)
    agent.run(6)
    levels = [r.headers["x-xun-compaction"] for r in agent.responses]
    assert "toolcall" in levels
    turn = len(levels) - 1 - levels[::-1].index("toolcall")
    sent = model_requests(fake_upstream.chat_requests)[turn].json["messages"]
    tools = [m for m in sent if m["role"] == "tool"]
    assert len(tools) > 2
    client_tools = [m for m in agent.messages[: len(sent)] if m["role"] == "tool"]
    # Everything but the newest result is a placeholder: the custom rule, not AutoCompactor's 12.
    assert [m["content"] for m in tools[:-1]] == [
        placeholder_for(m["tool_call_id"]) for m in client_tools[:-1]
    ]
    assert tools[-1]["content"] == client_tools[-1]["content"]


# -- per-request headers -------------------------------------------------------------------


def run_agent(proxy: Any, openai_client: Any, headers: dict[str, str], turns: int) -> Agent:
    client = openai_client(proxy, session="h-" + str(sorted(headers)), default_headers=headers)
    agent = Agent(client, output_size=2000)
    agent.run(turns)
    return agent


def levels_of(agent: Agent) -> list[str]:
    return [r.headers["x-xun-compaction"] for r in agent.responses]


def test_token_threshold_header_overrides_the_setting(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    fake_upstream.default = ModelScript()
    proxy = make_proxy(token_threshold=1_000_000)
    low = run_agent(proxy, openai_client, {"X-Xun-Token-Threshold": "8000"}, 18)
    assert "toolcall" in levels_of(low)
    for bad in ("0", "-5", "lots", "8e3"):
        agent = run_agent(proxy, openai_client, {"X-Xun-Token-Threshold": bad}, 18)
        assert set(levels_of(agent)) == {"none"}, bad
    assert all("x-xun-token-threshold" not in r.headers for r in fake_upstream.chat_requests)


@pytest.mark.parametrize("value", ["1", "1023"])
def test_token_threshold_header_is_bounded_below(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, value: str
) -> None:
    """`X-Xun-Token-Threshold: 1` made every turn a compaction and its extra upstream calls;
    below 1024 (`MIN_HEADER_THRESHOLD`) a value counts as 1024."""
    fake_upstream.default = ModelScript()
    proxy = make_proxy(token_threshold=1_000_000)
    agent = Agent(
        openai_client(
            proxy, session="tiny-" + value, default_headers={"X-Xun-Token-Threshold": value}
        ),
        output_size=40,
    )
    agent.run(12)
    assert set(levels_of(agent)) == {"none"}
    assert len(fake_upstream.chat_requests) == 12  # one upstream call a turn, no summaries
    assert MIN_HEADER_THRESHOLD == 1024


@pytest.mark.parametrize("value", ["off", "OFF", "Off"])
def test_compact_off_header_passes_history_through(
    fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any, value: str
) -> None:
    fake_upstream.default = ModelScript()
    proxy = make_proxy(token_threshold=2000, toolcall_keep_max=2)
    agent = run_agent(proxy, openai_client, {"X-Xun-Compact": value}, 8)
    assert set(levels_of(agent)) == {"none"}
    last = model_requests(fake_upstream.chat_requests)[-1]
    assert last.json["messages"] == agent.messages[: len(last.json["messages"])]
    assert "x-xun-compact" not in last.headers
    # The same session without the header compacts at once.
    agent.client = openai_client(proxy, session=agent.client.default_headers["X-Session-Id"])
    agent.step()
    assert levels_of(agent)[-1] == "toolcall"
