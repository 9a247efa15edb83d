"""`xun-proxy serve --help` agrees with the settings (issue 29): every flag of the settings is
there, and each help text names the default `Settings` really has, read from `Settings`
itself (not a copy of the text), and the configuration table (docs/configuration.md) lists the
same flags.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from proxy import cli
from proxy.compaction.windows import CAP_WINDOW_SHARE, DEFAULT_WINDOW_SHARE
from proxy.setting_values import OPTIONS
from proxy.settings import Settings, default_store_url

CONFIGURATION = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text(
    encoding="utf-8"
)


def serve_parser() -> argparse.ArgumentParser:
    parser = cli._build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve: argparse.ArgumentParser = commands.choices["serve"]
    return serve


def helps() -> dict[str, str]:
    """Each serve flag's help, as rendered (% expanded), whitespace folded."""
    parser = serve_parser()
    formatter = parser._get_formatter()
    out = {}
    for action in parser._actions:
        if action.option_strings and action.help:
            text = formatter._expand_help(action)
            out[action.option_strings[0]] = " ".join(text.split())
    return out


def default(field: str) -> object:
    info = Settings.model_fields[field]
    return info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]


def test_every_flag_of_the_settings_is_a_serve_flag_with_help() -> None:
    flags = {o.flag for o in OPTIONS if o.flag}
    assert flags - {"--no-auto-compact"} <= set(helps())
    assert "--no-auto-compact" in helps()
    # and no serve flag unknown to the settings (besides --help and the config file)
    assert set(helps()) - flags == {"-h", "--config"}


def test_help_names_the_settings_defaults() -> None:
    h = helps()
    headers = default("session_headers")
    assert isinstance(headers, list) and len(headers) > 1
    assert ", ".join(headers) in h["--session-header"]  # the whole ordered list
    for scheme in ("memory://", "sqlite:///", "redis://"):
        assert scheme in h["--store"]
    assert default_store_url() in h["--store"]
    assert f"(default {default('upstream_base_url')})" in h["--upstream"]
    assert f"(default {default('anthropic_base_url')})" in h["--anthropic-upstream"]
    assert f"(default {default('host')})" in h["--host"]
    assert f"(default {default('port')})" in h["--port"]
    assert f"else {default('token_threshold')};" in h["--token-threshold"]
    assert f"{DEFAULT_WINDOW_SHARE * 100:g}% of the model's window" in h["--token-threshold"]
    assert f"{CAP_WINDOW_SHARE * 100:g}% of a known window" in h["--token-threshold"]
    assert f"(default {default('max_body_bytes')}:" in h["--max-body-bytes"]
    assert f"(default {float(str(default('drain_timeout'))):g})" in h["--drain-timeout"]
    assert f"(default {default('log_level')})" in h["--log-level"]
    assert f"(default {default('mode')})" in h["--mode"]
    assert default("log_format") is None and "terminal" in h["--log-format"]
    for field, flag in (("upstream_api_key", "--upstream-api-key"), ("admin_key", "--admin-key")):
        assert default(field) is None and "(default: none" in h[flag]
    assert default("summary_model") is None and "the request's model" in h["--summary-model"]


def test_readme_table_agrees_with_the_help() -> None:
    """Each flag's row in the configuration table names the same default as its help."""
    rows = {}
    for row in (line for line in CONFIGURATION.splitlines() if line.startswith("| `--")):
        flags_cell = row.split("|")[1]
        for flag in re.findall(r"`(--[a-z-]+)", flags_cell):
            rows[flag] = row
    for flag in helps():
        if flag in ("-h",):
            continue
        assert flag in rows, f"{flag} is not in docs/configuration.md's table"
    for name in default("session_headers"):  # type: ignore[attr-defined]
        assert f"`{name}`" in rows["--session-header"]
    assert "redis://" in rows["--store"]
    assert str(default("port")) in rows["--host"]
    assert f"{default('token_threshold')}" in rows["--token-threshold"]


@pytest.mark.parametrize(
    "flags",
    [["--session-header", "X-A,X-B"], ["--session-header", "X-A", "--session-header", "X-B"]],
)
def test_session_header_flag_takes_a_comma_list(
    flags: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Settings] = []
    monkeypatch.setattr(
        "proxy.server.lifecycle.serve", lambda app, **_: seen.append(app.state.settings) or 0
    )
    monkeypatch.setattr("proxy.server.logging.configure_logging", lambda *a, **k: None)
    assert cli.main(["--store", "memory://", *flags]) == 0
    assert seen[-1].session_headers == ["X-A", "X-B"]
