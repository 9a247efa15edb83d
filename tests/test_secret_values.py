"""Keys with whitespace around them (a key file's newline) are stripped at start-up; keys
with whitespace or control characters inside stop the proxy, naming the setting.

Issue 26, item 6: `XUN_ADMIN_KEY=$'key\\n'` used to start, then answer every admin request
401; `XUN_UPSTREAM_API_KEY=$'sk-x\\n'` turned every request into a 502. The start-up goes
through the `xun-proxy` command (`proxy.cli.main`) and the app it builds is served by real
uvicorn against the fake upstream.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy import cli
from proxy.settings import ConfigError, Settings, load_settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import UvicornThread

SECRETS = (
    ("XUN_ADMIN_KEY", "admin_key", "admin.key"),
    ("XUN_UPSTREAM_API_KEY", "upstream_api_key", "upstream.api_key"),
    ("XUN_ANTHROPIC_API_KEY", "anthropic_api_key", "upstream.anthropic_api_key"),
    (
        "XUN_SUMMARY_UPSTREAM_API_KEY",
        "summary_upstream_api_key",
        "auto_compact.summary_upstream_api_key",
    ),
)
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("XUN_"):
            monkeypatch.delenv(name)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The app `xun-proxy` would serve, recorded instead of served."""
    apps: list[Any] = []

    def serve(app: Any, **kwargs: Any) -> int:
        apps.append(app)
        return 0

    monkeypatch.setattr("proxy.server.lifecycle.serve", serve)
    monkeypatch.setattr("proxy.server.logging.configure_logging", lambda *a, **k: None)
    return apps


def test_padded_keys_from_the_environment_work_end_to_end(
    served: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XUN_ADMIN_KEY", "adm-key\n")
    monkeypatch.setenv("XUN_UPSTREAM_API_KEY", "sk-up\r\n")
    with FakeUpstream() as fake:
        assert cli.main(["--store", "memory://", "--upstream", fake.url]) == 0
        (app,) = served
        with UvicornThread(app) as server:
            admin = httpx.get(
                server.url + "/admin/sessions", headers={"Authorization": "Bearer adm-key"}
            )
            assert admin.status_code == 200, admin.text
            chat = httpx.post(server.url + "/v1/chat/completions", json=CHAT)
            assert chat.status_code == 200, chat.text
        (seen,) = fake.requests
        assert seen.headers["authorization"] == "Bearer sk-up"


def test_padded_keys_from_a_config_file_and_flags(served: list[Any], tmp_path: Path) -> None:
    config = tmp_path / "xun.yaml"
    # A YAML block scalar keeps the newline, as a value pasted from a key file does.
    config.write_text(
        "upstream:\n  api_key: |\n    sk-file\n  anthropic_api_key: ' sk-ant-file '\n"
        'admin:\n  key: "adm-file\\t"\nstore:\n  url: memory://\n'
    )
    assert cli.main(["--config", str(config)]) == 0
    settings: Settings = served[-1].state.settings
    assert settings.upstream_api_key_value == "sk-file"
    assert settings.anthropic_api_key is not None
    assert settings.anthropic_api_key.get_secret_value() == "sk-ant-file"
    assert settings.check_admin_key("adm-file")
    assert cli.main(["--store", "memory://", "--admin-key", " adm-flag\n"]) == 0
    assert served[-1].state.settings.check_admin_key("adm-flag")


@pytest.mark.parametrize(("env", "field", "key"), SECRETS)
@pytest.mark.parametrize("padded", ["k-1\n", "k-1\r\n", " k-1\t", "\n k-1 \n"])
def test_each_secret_is_stripped(env: str, field: str, key: str, padded: str) -> None:
    settings = load_settings(env={env: padded})
    assert getattr(settings, field).get_secret_value() == "k-1"


@pytest.mark.parametrize(("env", "field", "key"), SECRETS)
@pytest.mark.parametrize("bad", ["k 1", "k\n1", "k\x001", "k\x7f", "ключ", "\n", ""])
def test_a_key_no_header_can_carry_stops_the_proxy_naming_it(
    env: str, field: str, key: str, bad: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(env={env: bad})
    (line,) = raised.value.lines
    assert line.startswith(f"{key}: ") and line.endswith(f"(from {env})")
    assert bad.strip() == "" or "visible ASCII" in line
    assert bad.strip() != "" or "must not be empty" in line
    assert "k\x00" not in line and "ключ" not in line  # the key itself is never shown


def test_the_cli_refuses_a_bad_key_at_start(
    served: list[Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XUN_UPSTREAM_API_KEY", "sk-a sk-b")
    assert cli.main(["--store", "memory://"]) == 2
    err = capsys.readouterr().err
    assert "upstream.api_key:" in err and "(from XUN_UPSTREAM_API_KEY)" in err
    assert "sk-a" not in err
    assert served == []
