"""Setting sources: where each setting can come from (its YAML key, environment variable and
flag: the option table), which keys of a config file name which setting, and the line that
reports a bad value under the name the user wrote. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """Where one setting can come from: its YAML key, environment variable and flag."""

    field: str
    key: str
    env: str | None = None
    flag: str | None = None


OPTIONS: tuple[Option, ...] = (
    Option("upstream_base_url", "upstream.base_url", "XUN_UPSTREAM", "--upstream"),
    Option(
        "anthropic_base_url",
        "upstream.anthropic_base_url",
        "XUN_ANTHROPIC_UPSTREAM",
        "--anthropic-upstream",
    ),
    Option("upstream_api_key", "upstream.api_key", "XUN_UPSTREAM_API_KEY", "--upstream-api-key"),
    Option("anthropic_api_key", "upstream.anthropic_api_key", "XUN_ANTHROPIC_API_KEY"),
    Option("connect_timeout", "upstream.connect_timeout", "XUN_CONNECT_TIMEOUT"),
    Option("read_timeout", "upstream.read_timeout", "XUN_READ_TIMEOUT"),
    Option("first_byte_timeout", "upstream.first_byte_timeout", "XUN_FIRST_BYTE_TIMEOUT"),
    Option("idle_timeout", "upstream.idle_timeout", "XUN_IDLE_TIMEOUT"),
    Option("write_timeout", "upstream.write_timeout", "XUN_WRITE_TIMEOUT"),
    Option("pool_timeout", "upstream.pool_timeout", "XUN_POOL_TIMEOUT"),
    Option("max_upstream_connections", "upstream.max_connections", "XUN_MAX_UPSTREAM_CONNECTIONS"),
    Option("host", "server.host", "XUN_HOST", "--host"),
    Option("port", "server.port", "XUN_PORT", "--port"),
    Option("drain_timeout", "server.drain_timeout", "XUN_DRAIN_TIMEOUT", "--drain-timeout"),
    Option("max_body_bytes", "server.max_body_bytes", "XUN_MAX_BODY_BYTES", "--max-body-bytes"),
    Option("body_timeout", "server.body_timeout", "XUN_BODY_TIMEOUT"),
    Option("send_timeout", "server.send_timeout", "XUN_SEND_TIMEOUT"),
    Option("allowed_hosts", "server.allowed_hosts", "XUN_ALLOWED_HOSTS", "--allowed-host"),
    Option("workers", "server.workers", "XUN_WORKERS", "--workers"),
    Option("store_url", "store.url", "XUN_STORE", "--store"),
    Option("session_ttl_seconds", "store.ttl_seconds", "XUN_SESSION_TTL_SECONDS"),
    Option("session_max_bytes", "store.max_session_bytes", "XUN_SESSION_MAX_BYTES"),
    Option("store_cache_entries", "store.cache_entries", "XUN_STORE_CACHE_ENTRIES"),
    Option("store_cache_bytes", "store.cache_bytes", "XUN_STORE_CACHE_BYTES"),
    Option(
        "token_threshold",
        "auto_compact.token_threshold",
        "XUN_TOKEN_THRESHOLD",
        "--token-threshold",
    ),
    Option("auto_compact_enabled", "auto_compact.enabled", "XUN_AUTO_COMPACT", "--no-auto-compact"),
    Option("mode", "auto_compact.mode", "XUN_MODE", "--mode"),
    Option("shadow_budget", "auto_compact.shadow_budget", "XUN_SHADOW_BUDGET"),
    Option("summary_model", "auto_compact.summary_model", "XUN_SUMMARY_MODEL", "--summary-model"),
    Option(
        "summary_upstream",
        "auto_compact.summary_upstream",
        "XUN_SUMMARY_UPSTREAM",
        "--summary-upstream",
    ),
    Option(
        "summary_upstream_api_key",
        "auto_compact.summary_upstream_api_key",
        "XUN_SUMMARY_UPSTREAM_API_KEY",
        "--summary-upstream-api-key",
    ),
    Option("summary_ahead", "auto_compact.summary_ahead", "XUN_SUMMARY_AHEAD", "--summary-ahead"),
    Option(
        "summary_ahead_connections",
        "auto_compact.summary_ahead_connections",
        "XUN_SUMMARY_AHEAD_CONNECTIONS",
    ),
    Option("toolcall_keep_max", "auto_compact.toolcall_keep_max", "XUN_TOOLCALL_KEEP_MAX"),
    Option("summary_keep_max", "auto_compact.summary_keep_max", "XUN_SUMMARY_KEEP_MAX"),
    Option("tail_max_tokens", "auto_compact.tail_max_tokens", "XUN_TAIL_MAX_TOKENS"),
    Option("escalation_rounds", "auto_compact.escalation_rounds", "XUN_ESCALATION_ROUNDS"),
    Option("max_retries", "auto_compact.max_retries", "XUN_MAX_RETRIES"),
    Option("compactor", "auto_compact.compactor", "XUN_COMPACTOR"),
    Option("max_extract_rounds", "auto_compact.max_extract_rounds", "XUN_MAX_EXTRACT_ROUNDS"),
    Option("extract_tool", "auto_compact.extract_tool", "XUN_EXTRACT_TOOL"),
    Option(
        "adaptive_reclaim",
        "auto_compact.adaptive_reclaim",
        "XUN_ADAPTIVE_RECLAIM",
        "--adaptive-reclaim",
    ),
    Option("context_windows", "auto_compact.context_windows", "XUN_CONTEXT_WINDOWS"),
    Option("cache_read_factors", "auto_compact.cache_read_factors", "XUN_CACHE_READ_FACTORS"),
    Option("cache_write_factors", "auto_compact.cache_write_factors", "XUN_CACHE_WRITE_FACTORS"),
    Option("cache_lifetimes", "auto_compact.cache_lifetimes", "XUN_CACHE_LIFETIMES"),
    Option("admin_key", "admin.key", "XUN_ADMIN_KEY", "--admin-key"),
    Option("prices", "savings.prices", "XUN_PRICES", "--prices"),
    Option("session_headers", "session.header", "XUN_SESSION_HEADER", "--session-header"),
    Option("tenant_header", "session.tenant_header", "XUN_TENANT_HEADER", "--tenant-header"),
    Option("log_level", "log.level", "XUN_LOG_LEVEL", "--log-level"),
    Option("log_content", "log.content", "XUN_LOG_CONTENT", "--log-content"),
    Option("log_format", "log.format", "XUN_LOG_FORMAT", "--log-format"),
)
OPTIONS_BY_FIELD: Mapping[str, Option] = {option.field: option for option in OPTIONS}
OPTIONS_BY_KEY: Mapping[str, Option] = {option.key: option for option in OPTIONS}
# The settings an environment variable gives as a JSON object.
JSON_FIELDS = frozenset(
    {"context_windows", "cache_read_factors", "cache_write_factors", "cache_lifetimes"}
)


def document_values(
    document: Mapping[Any, Any], source: str
) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """A config file's sections of keys as (value, `source`) by setting, and a line for each
    section or key that names no setting."""
    values: dict[str, tuple[Any, str]] = {}
    errors: list[str] = []
    sections = sorted({option.key.split(".")[0] for option in OPTIONS})
    for section, entries in document.items():
        if section not in sections:
            errors.append(f"{section}: unknown config section (expected {', '.join(sections)})")
            continue
        if not isinstance(entries, dict):
            errors.append(f"{section}: expected a mapping of keys")
            continue
        for name, value in entries.items():
            option = OPTIONS_BY_KEY.get(f"{section}.{name}")
            if option is None:
                errors.append(f"{section}.{name}: unknown config key")
                continue
            values[option.field] = (value, source)
    return values, errors


def error_line(error: Mapping[str, Any], origins: Mapping[str, str]) -> str:
    """`auto_compact.token_threshold: Input should be greater than 0 (from XUN_...)`."""
    loc = tuple(error["loc"])
    if not loc:
        return f"config: {error['msg']}"
    field = str(loc[0])
    option = OPTIONS_BY_FIELD.get(field)
    label = option.key if option is not None else field
    for part in loc[1:]:
        label += f"[{part}]" if isinstance(part, int) else f".{part}"
    origin = origins.get(field)
    return f"{label}: {error['msg']}" + (f" (from {origin})" if origin else "")


__all__ = [
    "JSON_FIELDS",
    "OPTIONS",
    "OPTIONS_BY_FIELD",
    "OPTIONS_BY_KEY",
    "Option",
    "document_values",
    "error_line",
]
