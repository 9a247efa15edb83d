"""Settings: sources and their precedence, YAML layout, validation messages, helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from proxy.setting_values import OPTIONS, is_loopback
from proxy.settings import ConfigError, Settings, default_store_url, load_settings

ENV: dict[str, str] = {"XDG_STATE_HOME": "/state"}


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def errors_of(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return exc.value.lines


def test_defaults() -> None:
    settings = load_settings({}, env=ENV)
    assert settings.upstream_base_url == "https://api.openai.com/v1"
    assert (settings.host, settings.port) == ("127.0.0.1", 8484)
    assert settings.store_url == "sqlite:////state/xun-proxy/sessions.db"
    assert settings.token_threshold == 192_000
    assert settings.auto_compact_enabled is True
    assert settings.admin_key is None and settings.upstream_api_key is None
    assert settings.summary_model is None
    assert settings.session_headers == [
        "X-Session-Id",
        "session_id",
        "session-id",
        "x-claude-code-session-id",
    ]
    assert (settings.toolcall_keep_max, settings.summary_keep_max) == (12, 16)
    assert (settings.escalation_rounds, settings.max_retries) == (2, 2)
    assert settings.compactor is None
    assert settings.max_body_bytes == 32 * 1024 * 1024
    assert (settings.connect_timeout, settings.read_timeout) == (10.0, 600.0)
    assert settings.max_upstream_connections == 256
    assert settings.max_extract_rounds == 4
    assert settings.session_ttl_seconds == 7 * 86400
    assert settings.session_max_bytes == 8 * 1024 * 1024
    assert (settings.log_level, settings.log_content) == ("info", False)
    assert settings.context_windows == {}
    assert settings.config_file is None


# (field, yaml key path, yaml value, env name, env value, flag value, expected per source)
PRECEDENCE = [
    ("port", "server.port", 1000, "XUN_PORT", "2000", "3000", (1000, 2000, 3000)),
    ("host", "server.host", "10.0.0.1", "XUN_HOST", "10.0.0.2", "10.0.0.3", None),
    (
        "upstream_base_url",
        "upstream.base_url",
        "http://file/v1",
        "XUN_UPSTREAM",
        "http://env/v1",
        "http://flag/v1",
        None,
    ),
    ("store_url", "store.url", "memory://", "XUN_STORE", "sqlite:///e.db", "sqlite:///f.db", None),
    (
        "token_threshold",
        "auto_compact.token_threshold",
        100,
        "XUN_TOKEN_THRESHOLD",
        "200",
        "300",
        (100, 200, 300),
    ),
    ("summary_model", "auto_compact.summary_model", "a", "XUN_SUMMARY_MODEL", "b", "c", None),
    (
        "session_headers",
        "session.header",
        "X-File",
        "XUN_SESSION_HEADER",
        "X-Env",
        ["X-Flag"],
        (["X-File"], ["X-Env"], ["X-Flag"]),
    ),
]


@pytest.mark.parametrize(
    ("field", "key", "file_value", "env_name", "env_value", "flag_value", "expected"),
    PRECEDENCE,
    ids=[row[0] for row in PRECEDENCE],
)
def test_precedence_flag_env_file_default(
    tmp_path: Path,
    field: str,
    key: str,
    file_value: Any,
    env_name: str,
    env_value: str,
    flag_value: Any,
    expected: tuple[Any, Any, Any] | None,
) -> None:
    section, name = key.split(".")
    config = write_config(tmp_path, f"{section}:\n  {name}: {file_value!r}\n")
    from_file, from_env, from_flag = expected or (file_value, env_value, flag_value)
    default = getattr(load_settings({}, env=ENV), field)
    env = {**ENV, env_name: env_value}
    flags = {"config_file": str(config), field: flag_value}
    assert getattr(load_settings(flags, env=env), field) == from_flag
    assert getattr(load_settings({"config_file": str(config)}, env=env), field) == from_env
    assert getattr(load_settings({"config_file": str(config)}, env=ENV), field) == from_file
    assert getattr(load_settings({}, env=ENV), field) == default != from_file


def test_flag_none_means_not_given() -> None:
    env = {**ENV, "XUN_PORT": "2000"}
    assert load_settings({"port": None, "host": None}, env=env).port == 2000


def test_yaml_nested_keys(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        """
upstream:
  base_url: http://localhost:11434/v1/
  api_key: sk-upstream
  connect_timeout: 2.5
  read_timeout: 30
  write_timeout: 5
  pool_timeout: 1
  max_connections: 8
server:
  host: 0.0.0.0
  port: 9000
  max_body_bytes: 1048576
store:
  url: redis://cache:6379/0
  ttl_seconds: 60
  max_session_bytes: 4096
auto_compact:
  enabled: false
  token_threshold: 8000
  summary_model: gpt-4o-mini
  toolcall_keep_max: 4
  summary_keep_max: 6
  escalation_rounds: 1
  max_retries: 0
  compactor: my_pkg.strategies:Aggressive
  max_extract_rounds: 2
  context_windows:
    llama3: 8192
    gpt-4o: 128000
admin:
  key: admin-secret
session:
  header: [X-Claude-Session, X-Session-Id]
log:
  level: DEBUG
  content: true
""",
    )
    s = load_settings({"config_file": str(config)}, env=ENV)
    assert s.upstream_base_url == "http://localhost:11434/v1"  # trailing slash dropped
    assert s.upstream_api_key_value == "sk-upstream"
    assert (s.connect_timeout, s.read_timeout, s.write_timeout, s.pool_timeout) == (
        2.5,
        30.0,
        5.0,
        1.0,
    )
    assert s.max_upstream_connections == 8
    assert (s.host, s.port, s.max_body_bytes) == ("0.0.0.0", 9000, 1048576)
    assert (s.store_url, s.session_ttl_seconds, s.session_max_bytes) == (
        "redis://cache:6379/0",
        60,
        4096,
    )
    assert s.auto_compact_enabled is False
    assert (s.token_threshold, s.summary_model) == (8000, "gpt-4o-mini")
    assert (s.toolcall_keep_max, s.summary_keep_max, s.escalation_rounds, s.max_retries) == (
        4,
        6,
        1,
        0,
    )
    assert s.compactor == "my_pkg.strategies:Aggressive"
    assert s.max_extract_rounds == 2
    assert s.context_windows == {"llama3": 8192, "gpt-4o": 128000}
    assert s.admin_key is not None and s.check_admin_key("admin-secret")
    assert s.session_headers == ["X-Claude-Session", "X-Session-Id"]
    assert (s.log_level, s.log_content) == ("debug", True)
    assert s.config_file == config


def test_every_option_has_a_distinct_key_and_env() -> None:
    keys = [o.key for o in OPTIONS]
    envs = [o.env for o in OPTIONS if o.env]
    assert len(keys) == len(set(keys)) and len(envs) == len(set(envs))
    assert {o.field for o in OPTIONS} == set(Settings.model_fields) - {"config_file"}


def test_config_file_from_env_and_flag_wins(tmp_path: Path) -> None:
    from_env = write_config(tmp_path, "server:\n  port: 1111\n")
    from_flag = tmp_path / "other.yaml"
    from_flag.write_text("server:\n  port: 2222\n")
    env = {**ENV, "XUN_CONFIG": str(from_env)}
    assert load_settings({}, env=env).port == 1111
    assert load_settings({"config_file": str(from_flag)}, env=env).port == 2222


def test_empty_config_file_is_defaults(tmp_path: Path) -> None:
    config = write_config(tmp_path, "# nothing yet\n")
    assert load_settings({"config_file": str(config)}, env=ENV).port == 8484


@pytest.mark.parametrize(
    ("value", "expected"),
    [("X-A", ["X-A"]), ("X-A, X-B", ["X-A", "X-B"]), (" X-B ,X-A,", ["X-B", "X-A"])],
)
def test_session_header_env_is_an_ordered_comma_list(value: str, expected: list[str]) -> None:
    env = {**ENV, "XUN_SESSION_HEADER": value}
    assert load_settings({}, env=env).session_headers == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("false", False), ("0", False), ("no", False), ("true", True), ("1", True)],
)
def test_auto_compact_env(value: str, expected: bool) -> None:
    assert (
        load_settings({}, env={**ENV, "XUN_AUTO_COMPACT": value}).auto_compact_enabled is expected
    )


def test_no_auto_compact_flag_beats_env() -> None:
    env = {**ENV, "XUN_AUTO_COMPACT": "true"}
    assert load_settings({"auto_compact_enabled": False}, env=env).auto_compact_enabled is False


def test_context_windows_from_env_json() -> None:
    env = {**ENV, "XUN_CONTEXT_WINDOWS": '{"llama3": 8192}'}
    assert load_settings({}, env=env).context_windows == {"llama3": 8192}
    with pytest.raises(ConfigError) as exc:
        load_settings({}, env={**ENV, "XUN_CONTEXT_WINDOWS": "llama3=8192"})
    assert errors_of(exc) == [
        "auto_compact.context_windows: XUN_CONTEXT_WINDOWS must be a JSON object"
    ]


# Validation: every message starts with the config key and says where the value came from.


def test_error_names_the_yaml_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, "auto_compact:\n  token_threshold: 0\n")
    with pytest.raises(ConfigError) as exc:
        load_settings({"config_file": str(config)}, env=ENV)
    (line,) = errors_of(exc)
    assert line.startswith("auto_compact.token_threshold: Input should be greater than 0")
    assert str(config) in line
    assert "auto_compact.token_threshold: Input should be greater than 0" in str(exc.value)


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        (
            {},
            {"XUN_TOKEN_THRESHOLD": "-5"},
            "auto_compact.token_threshold: Input should be greater than 0"
            " (from XUN_TOKEN_THRESHOLD)",
        ),
        (
            {"token_threshold": "0"},
            {},
            "auto_compact.token_threshold: Input should be greater than 0 (from --token-threshold)",
        ),
        (
            {"port": "http"},
            {},
            "server.port: Input should be a valid integer, unable to parse string as an integer"
            " (from --port)",
        ),
        (
            {},
            {"XUN_PORT": "70000"},
            "server.port: Input should be less than or equal to 65535 (from XUN_PORT)",
        ),
        (
            {"upstream_base_url": "api.openai.com"},
            {},
            "upstream.base_url: Value error, must be an absolute http:// or https:// URL"
            " (from --upstream)",
        ),
        (
            {},
            {"XUN_STORE": "postgres://db"},
            "store.url: Value error, must be memory://, sqlite:///path.db or redis://host:port/db"
            " (from XUN_STORE)",
        ),
        (
            {"session_headers": ["X Bad"]},
            {},
            "session.header: Value error, 'X Bad' is not a valid HTTP header name"
            " (from --session-header)",
        ),
        (
            {},
            {"XUN_LOG_LEVEL": "loud"},
            "log.level: Input should be 'critical', 'error', 'warning', 'info' or 'debug'"
            " (from XUN_LOG_LEVEL)",
        ),
        (
            {},
            {"XUN_COMPACTOR": "not a path"},
            "auto_compact.compactor: Value error, must be one of seed, cache-aware or an import"
            ' path like "package.module:ClassName" (from XUN_COMPACTOR)',
        ),
    ],
)
def test_error_names_key_and_source(
    flags: dict[str, Any], env: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(flags, env={**ENV, **env})
    assert errors_of(exc) == [expected]


def test_nested_value_errors_point_inside(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        "auto_compact:\n  context_windows:\n    llama3: 0\nsession:\n  header: [X-A, 'b c']\n",
    )
    with pytest.raises(ConfigError) as exc:
        load_settings({"config_file": str(config)}, env=ENV)
    lines = errors_of(exc)
    assert len(lines) == 2
    assert lines[0].startswith(
        "auto_compact.context_windows.llama3: Input should be greater than 0"
    )
    assert lines[1].startswith("session.header: Value error, 'b c' is not a valid HTTP header")


def test_all_errors_are_reported_together() -> None:
    env = {**ENV, "XUN_PORT": "x", "XUN_TOKEN_THRESHOLD": "0", "XUN_READ_TIMEOUT": "-1"}
    with pytest.raises(ConfigError) as exc:
        load_settings({}, env=env)
    keys = sorted(line.split(":")[0] for line in errors_of(exc))
    assert keys == ["auto_compact.token_threshold", "server.port", "upstream.read_timeout"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("upstream:\n  baseurl: http://x\n", ["upstream.baseurl: unknown config key"]),
        (
            "server:\n  port: 1\nextra:\n  a: 1\n",
            ["extra: unknown config section (expected admin, auto_compact, log,"],
        ),
        ("port: 9000\n", ["port: unknown config section"]),
        ("server: 9000\n", ["server: expected a mapping of keys"]),
        ("- a\n- b\n", ["the top level must be a mapping"]),
        ("server: [\n", ["not valid YAML"]),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, expected: list[str]) -> None:
    config = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_settings({"config_file": str(config)}, env=ENV)
    lines = errors_of(exc)
    assert len(lines) == len(expected)
    for line, fragment in zip(lines, expected, strict=True):
        assert fragment in line


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings({"config_file": str(tmp_path / "nope.yaml")}, env=ENV)
    assert "nope.yaml" in str(exc.value)


def test_unknown_override_is_rejected() -> None:
    with pytest.raises(ConfigError, match="tokenthreshold: unknown setting"):
        load_settings({"tokenthreshold": 5}, env=ENV)


# Environment handling.


def test_settings_constructor_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XUN_PORT", "1234")
    monkeypatch.setenv("PORT", "1234")
    assert Settings().port == 8484
    assert load_settings({}).port == 1234  # load_settings defaults to os.environ


def test_default_store_url_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from proxy.store.factory import default_store_url as store_default

    assert default_store_url({"XDG_STATE_HOME": "/x"}) == "sqlite:////x/xun-proxy/sessions.db"
    home_default = f"sqlite:///{Path.home()}/.local/state/xun-proxy/sessions.db"
    assert default_store_url({}) == home_default
    assert default_store_url({"XDG_STATE_HOME": "relative"}) == home_default  # XDG: ignore
    for value in (str(tmp_path), "relative", ""):
        monkeypatch.setenv("XDG_STATE_HOME", value)
        assert default_store_url() == store_default()


def test_settings_are_frozen_and_strict() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.port = 1
    with pytest.raises(ValidationError):
        Settings(prot=1)  # type: ignore[call-arg]


def test_secrets_stay_out_of_repr() -> None:
    settings = Settings.model_validate(
        {
            "upstream_api_key": "sk-upstream-secret",
            "admin_key": "admin-secret",
            "summary_upstream_api_key": "sk-summary-secret",
        }
    )
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "sk-upstream-secret" not in text and "admin-secret" not in text
        assert "sk-summary-secret" not in text
    assert settings.upstream_api_key_value == "sk-upstream-secret"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert Settings(host=host).is_loopback is loopback


@pytest.mark.parametrize(
    ("host", "key", "enabled"),
    [
        ("127.0.0.1", None, True),
        ("127.0.0.1", "k", True),
        ("0.0.0.0", None, False),
        ("0.0.0.0", "k", True),
    ],
)
def test_admin_enabled(host: str, key: str | None, enabled: bool) -> None:
    assert Settings.model_validate({"host": host, "admin_key": key}).admin_enabled is enabled


def test_check_admin_key() -> None:
    settings = Settings(admin_key=SecretStr("right"))
    assert settings.check_admin_key("right")
    assert not settings.check_admin_key("wrong")
    assert not settings.check_admin_key(None)
    assert not Settings().check_admin_key("anything")
    assert not settings.check_admin_key("")


@pytest.mark.parametrize("value", ["", " ", "\t "])
def test_an_empty_admin_key_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(env={"XUN_ADMIN_KEY": value})
    (line,) = raised.value.lines
    assert line.startswith("admin.key: ") and "must not be empty" in line
    assert line.endswith("(from XUN_ADMIN_KEY)")
    with pytest.raises(ConfigError):
        load_settings({"admin_key": value}, env={})


@pytest.mark.parametrize("name", ["XUN_BODY_TIMEOUT", "XUN_SEND_TIMEOUT"])
def test_client_timeouts_must_be_positive(name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(env={name: "0"})
    assert name in raised.value.lines[0]
    assert load_settings(env={}).body_timeout == load_settings(env={}).send_timeout == 60.0
