"""Configuration: one validated `Settings` object built from flags, environment and a YAML file.

This is the only module that reads the environment. Precedence is flag > env > file > default;
`load_settings` resolves the sources itself (instead of pydantic-settings' implicit ones) so a
bad value is reported under the name the user actually wrote: its config key, and the flag or
environment variable it came from.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from proxy.errors import XunError
from proxy.setting_values import (
    JSON_FIELDS,
    OPTIONS,
    OPTIONS_BY_FIELD,
    checked_prices,
    clean_secret,
    comma_parts,
    compactor_name,
    document_values,
    error_line,
    header_names,
    is_loopback,
    normalise_names,
    store_url,
    tenant_header,
    upstream_url,
    worker_count,
)

MiB = 1024 * 1024
DAY = 24 * 60 * 60
_WriteFactor = Annotated[float, Field(ge=0, le=10)]
_Money = Annotated[float, Field(ge=0)]


CONFIG_ENV = "XUN_CONFIG"


class ConfigError(XunError):
    """Configuration that cannot be used; `lines` name each bad key and what is wrong."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = list(lines)
        super().__init__("invalid configuration:\n  " + "\n  ".join(self.lines))


def default_store_url(env: Mapping[str, str] | None = None) -> str:
    """`sqlite:///` + `$XDG_STATE_HOME` (or `~/.local/state`) + `/xun-proxy/sessions.db`.

    The same rule as `proxy.store.base.default_store_url`, but reading the given mapping; a
    relative `XDG_STATE_HOME` is ignored, as the XDG spec says.
    """
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return f"sqlite:///{base / 'xun-proxy' / 'sessions.db'}"


PositiveInt = Annotated[int, Field(gt=0)]


DEFAULT_SESSION_HEADERS = ("X-Session-Id", "session_id", "session-id", "x-claude-code-session-id")


class Settings(BaseSettings):
    """Every knob of the proxy. Build it with `load_settings`; `Settings(...)` reads no env."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=True)

    upstream_base_url: str = "https://api.openai.com/v1"
    # Anthropic's API for /v1/messages, a base URL as ANTHROPIC_BASE_URL takes it (no /v1).
    anthropic_base_url: str = "https://api.anthropic.com"
    upstream_api_key: SecretStr | None = None
    # The proxy's own Anthropic requests (manual summaries of Messages sessions) send it as
    # x-api-key; client requests keep their own credentials.
    anthropic_api_key: SecretStr | None = None
    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    # Waiting for the response headers, and then between two body reads (None: read_timeout).
    first_byte_timeout: float | None = Field(default=None, gt=0)
    idle_timeout: float | None = Field(default=None, gt=0)
    write_timeout: float = Field(default=60.0, gt=0)
    pool_timeout: float = Field(default=10.0, gt=0)
    max_upstream_connections: int = Field(default=256, gt=0)

    host: str = "127.0.0.1"
    port: int = Field(default=8484, ge=0, le=65535)
    # Seconds in-flight requests (streams included) get to finish after SIGTERM.
    drain_timeout: float = Field(default=30.0, ge=0)
    max_body_bytes: int = Field(default=32 * MiB, gt=0)
    # Seconds a client gets to deliver its whole request body (then 408), and to take each
    # part of a response (then the proxy stops serving it and frees its upstream connection).
    body_timeout: float = Field(default=60.0, gt=0)
    send_timeout: float = Field(default=60.0, gt=0)
    # Host names besides loopback ones that may spend the operator's key (see proxy.server.origin).
    allowed_hosts: tuple[str, ...] = ()

    store_url: str = Field(default_factory=default_store_url)
    session_ttl_seconds: int = Field(default=7 * DAY, gt=0)
    session_max_bytes: int = Field(default=8 * MiB, gt=0)
    # The in-process cache of hot session states (0 entries: no cache); memory:// has none.
    store_cache_entries: int = Field(default=1024, ge=0)
    store_cache_bytes: int = Field(default=64 * MiB, ge=0)
    # Processes serving the one port (proxy.server.workers). After store_url: checked against it.
    workers: int = Field(default=1, ge=1)

    token_threshold: int = Field(default=192_000, gt=0)
    auto_compact_enabled: bool = True
    # compact: requests go upstream compacted. shadow: every request goes upstream exactly as
    # the client sent it, and the proxy records what it would have sent (proxy.turn.shadow_turn).
    mode: Literal["compact", "shadow"] = "compact"
    # Seconds a shadow turn may take beside its pass-through; past them it is abandoned.
    shadow_budget: float = Field(default=5.0, gt=0)
    summary_model: str | None = None
    # An OpenAI-compatible server of their own for summaries (Chat Completions), and its key.
    summary_upstream: str | None = None
    summary_upstream_api_key: SecretStr | None = None
    # Write a session's next summary in the background before the turn that needs it
    # (proxy.turn.summary_ahead); off: the crossing turn waits for its summary.
    summary_ahead: bool = True
    # Summaries written ahead waiting on the upstream at once, across sessions (None: a quarter
    # of max_upstream_connections); more wait for a later turn (proxy.turn.summary_ahead_limits).
    summary_ahead_connections: int | None = Field(default=None, gt=0)
    # Level 1 learns per session from what the model asks back (proxy.session.asked_back): a
    # tool whose reclaimed results come back often keeps more of them whole, or all of them.
    adaptive_reclaim: bool = True
    toolcall_keep_max: int = Field(default=12, ge=0)
    summary_keep_max: int = Field(default=16, ge=0)
    # The cost-aware compactor's kept tail after a summary, in tokens (at most 3 % of the
    # threshold either way); the seed's compactor counts messages instead (summary_keep_max).
    tail_max_tokens: int = Field(default=3000, ge=0)
    escalation_rounds: int = Field(default=2, ge=0)
    max_retries: int = Field(default=2, ge=0)
    compactor: str | None = None
    max_extract_rounds: int = Field(default=4, ge=0)
    # When the extract tool joins a session's requests: from the first turn of a session with
    # tools (always: the tools block never changes, so no compaction rewrites it), or from its
    # first compaction on (after_compaction: a session that never compacts costs what it costs
    # direct, and the first compaction rewrites the tools block).
    extract_tool: Literal["always", "after_compaction"] = "always"
    context_windows: dict[str, PositiveInt] = Field(default_factory=dict)
    # Cache-read price relative to uncached input, by model-name prefix; the cost-aware
    # compactor's defaults (proxy.compaction.economics) apply to models not listed.
    cache_read_factors: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=dict)
    # Cache-write price relative to uncached input, by model-name prefix: one factor, or one
    # per cache lifetime ({"5m": 1.25, "1h": 2.0}); proxy.compaction.economics has the defaults.
    cache_write_factors: dict[str, _WriteFactor | dict[Literal["5m", "1h"], _WriteFactor]] = Field(
        default_factory=dict
    )
    # Seconds a provider keeps an unused prompt cache, by model-name prefix, when the request
    # asks for no lifetime of its own; proxy.compaction.cache_life has the defaults.
    cache_lifetimes: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)

    admin_key: SecretStr | None = None
    # Model prices for the savings reports, by model-name prefix, in money per million tokens
    # ({"input", "cache_read", "cache_write", "output"}); a JSON file's path, or the mapping in
    # the config file. proxy.compaction.prices has the built-in table they extend.
    prices: dict[str, dict[Literal["input", "cache_read", "cache_write", "output"], _Money]] = (
        Field(default_factory=dict)
    )
    # X-Session-Id, then the ids agents send on their own: Codex CLI (`session_id`, or
    # `session-id`) and Claude Code (`x-claude-code-session-id`).
    session_headers: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SESSION_HEADERS), min_length=1
    )
    # A header whose value, when a request carries it, is the tenant instead of the credential
    # (so a rotated token keeps its sessions). Off: the credential decides (proxy.session.identity).
    tenant_header: str | None = None

    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_content: bool = False
    # console: one readable line a request; json: one JSON object a line; None: console when
    # stderr is a terminal, JSON otherwise (proxy.server.logging).
    log_format: Literal["console", "json"] | None = None
    config_file: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_settings merges env and file itself; constructing Settings never reads os.environ.
        return (init_settings,)

    @field_validator("upstream_base_url", "anthropic_base_url", "summary_upstream")
    @classmethod
    def _check_upstream(cls, value: str | None) -> str | None:
        return None if value is None else upstream_url(value)

    @field_validator("prices", mode="before")
    @classmethod
    def _read_prices(cls, value: Any) -> Any:
        """A JSON object, or a path to a file of one (`--prices FILE`); every entry needs
        an `input` price."""
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"prices are not a JSON object: {exc}") from exc
        elif isinstance(value, str | Path):
            try:
                value = json.loads(Path(value).read_text(encoding="utf-8"))
            except OSError as exc:
                raise ValueError(f"cannot read the prices file {value}: {exc.strerror}") from exc
            except json.JSONDecodeError as exc:
                raise ValueError(f"the prices file {value} is not JSON: {exc}") from exc
        return checked_prices(value)

    @field_validator("store_url")
    @classmethod
    def _check_store(cls, value: str) -> str:
        return store_url(value)

    @field_validator("workers")
    @classmethod
    def _check_workers(cls, value: int, info: ValidationInfo) -> int:
        return worker_count(value, str(info.data.get("store_url", "")))

    @field_validator("session_headers", mode="before")
    @classmethod
    def _split_headers(cls, value: Any) -> Any:
        parts = comma_parts(value)
        return value if parts is None else [part.strip() for part in parts]

    @field_validator("session_headers")
    @classmethod
    def _check_headers(cls, value: list[str]) -> list[str]:
        return header_names(value)

    @field_validator("tenant_header")
    @classmethod
    def _check_tenant_header(cls, value: str | None) -> str | None:
        return None if value is None else tenant_header(value)

    @field_validator("compactor")
    @classmethod
    def _check_compactor(cls, value: str | None) -> str | None:
        return None if value is None else compactor_name(value)

    @field_validator(
        "upstream_api_key", "anthropic_api_key", "summary_upstream_api_key", "admin_key"
    )
    @classmethod
    def _check_secret(cls, value: SecretStr | None) -> SecretStr | None:
        # Stripped: a key file or a Kubernetes secret ends in a newline the key never has.
        return None if value is None else SecretStr(clean_secret(value.get_secret_value()))

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _check_hosts(cls, value: Any) -> Any:
        parts = comma_parts(value)
        return value if parts is None else normalise_names(parts)

    @field_validator("log_level", "log_format", "mode", mode="before")
    @classmethod
    def _lower_level(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @property
    def is_loopback(self) -> bool:
        """True when the server binds to a loopback address only."""
        return is_loopback(self.host)

    @property
    def admin_enabled(self) -> bool:
        """Admin routes answer with a key, or without one only on a loopback bind."""
        return self.admin_key is not None or self.is_loopback

    def check_admin_key(self, presented: str | None) -> bool:
        """Constant-time check of a presented admin key (False when no key is configured)."""
        if self.admin_key is None or not presented:
            return False
        expected = self.admin_key.get_secret_value().encode()
        return hmac.compare_digest(expected, presented.encode())

    @property
    def upstream_api_key_value(self) -> str | None:
        """The configured upstream key in clear, for building the Authorization header."""
        return None if self.upstream_api_key is None else self.upstream_api_key.get_secret_value()


def colour_allowed(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment lets a terminal's logs have colour: no `NO_COLOR`
    (https://no-color.org: any non-empty value) and a terminal that is not `dumb`."""
    env = os.environ if env is None else env
    return not env.get("NO_COLOR") and env.get("TERM", "") != "dumb"


def _env_values(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    values: dict[str, tuple[Any, str]] = {}
    errors: list[str] = []
    for option in OPTIONS:
        if option.env is None or option.env not in env:
            continue
        raw: Any = env[option.env]
        if option.field in JSON_FIELDS:
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError:
                errors.append(f"{option.key}: {option.env} must be a JSON object")
                continue
        values[option.field] = (raw, option.env)
    if errors:
        raise ConfigError(errors)
    return values


def _file_values(path: Path) -> dict[str, tuple[Any, str]]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"config file {path}: {exc.strerror or exc}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"config file {path}: not valid YAML ({exc})"]) from exc
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError([f"config file {path}: the top level must be a mapping of sections"])
    values, errors = document_values(document, str(path))
    if errors:
        raise ConfigError(errors)
    return values


def load_settings(
    cli_overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Merge defaults < config file < environment < flags and validate.

    `cli_overrides` maps field names to values (None means "flag not given"). `env` defaults
    to `os.environ`. Raises `ConfigError` naming every bad key.
    """
    env = os.environ if env is None else env
    flags = {name: value for name, value in (cli_overrides or {}).items() if value is not None}
    unknown = sorted(set(flags) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"{name}: unknown setting" for name in unknown)

    config_file = flags.get("config_file") or env.get(CONFIG_ENV) or None
    merged: dict[str, tuple[Any, str]] = {}
    if config_file is not None:
        merged.update(_file_values(Path(config_file)))
    merged.update(_env_values(env))
    for name, value in flags.items():
        option = OPTIONS_BY_FIELD.get(name)
        merged[name] = (value, option.flag if option and option.flag else f"--{name}")

    values = {name: value for name, (value, _) in merged.items()}
    values.setdefault("store_url", default_store_url(env))
    if config_file is not None:
        values["config_file"] = Path(config_file)
    try:
        return Settings(**values)
    except ValidationError as exc:
        origins = {name: origin for name, (_, origin) in merged.items()}
        lines = [error_line(error, origins) for error in exc.errors()]
        raise ConfigError(lines) from exc
