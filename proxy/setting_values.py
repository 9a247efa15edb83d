"""Setting values: where each setting can come from (its YAML key, environment variable and
flag: the option table; which keys of a config file name which setting; the line that reports
a bad value under the name the user wrote), pure checks of single values (URLs, header names,
the compactor's name, prices, keys (secrets), bind addresses) and host names.

Host names: which `Host` and `Origin` names a request may carry, one exact parser for every
check. A `Host` header is `host [":" port]` (RFC 9110, 7.2): `host` is a bracketed IPv6
literal, a dotted IPv4 address or a registered name; `port` is digits. `host_name` returns the
name, or None for anything else, so `[::1].evil.com`, `127.0.0.1.evil.com` or `localhost:80:80`
never reads as a loopback name. A name with one trailing dot (fully qualified: `localhost.`)
is the same name without it. A name is loopback when it is `localhost`, an address in
127.0.0.0/8 or `[::1]`; `allowed_host` also accepts the names an operator configured
(`server.allowed_hosts`), in any case and with any port. An `Origin` (`scheme://host[:port]`)
is judged by its host the same way; the opaque origin `null` is never allowed. Used by the
admin routes (`proxy.admin.base`) and by the checks that guard an operator's own upstream key
(`proxy.server.origin`). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
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


# The strategies that ship with the proxy, by the short name `auto_compact.compactor` takes.
BUILTIN_COMPACTORS: Mapping[str, str] = {
    "seed": "proxy.compact:AutoCompactor",
    "cache-aware": "proxy.compaction.cache_aware:CacheAwareCompactor",
}


def clean_secret(value: str) -> str:
    """A key without the whitespace around it; ValueError when nothing is left, or when a
    character inside is not visible ASCII (an HTTP header could not carry it as it is)."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty; leave it unset, or set a key")
    if not all(0x21 <= ord(c) <= 0x7E for c in value):
        raise ValueError(
            "must be visible ASCII characters only (whitespace or a control character "
            "inside the key)"
        )
    return value


_HEADER_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def upstream_url(value: str) -> str:
    """An absolute http(s) URL without a query, fragment or trailing slash; else ValueError."""
    value = value.strip()
    if not re.match(r"^https?://[^/?#\s]+", value):
        raise ValueError("must be an absolute http:// or https:// URL")
    if "?" in value or "#" in value:
        raise ValueError("must not carry a query string or fragment")
    return value.rstrip("/")


def store_url(value: str) -> str:
    """A store URL of a kind the proxy has (memory, sqlite, redis); else ValueError."""
    value = value.strip()
    if not re.match(r"^(memory|sqlite|redis|rediss):", value, re.IGNORECASE):
        raise ValueError("must be memory://, sqlite:///path.db or redis://host:port/db")
    return value


def _in_process_store(url: str) -> bool:
    """memory://, or an SQLite database in memory: nothing another process can see."""
    lowered = url.strip().lower()
    return lowered.startswith("memory:") or lowered.startswith("sqlite:///:memory:")


def worker_count(value: int, store: str) -> int:
    """A number of workers that can share `store`; ValueError for more than one on a store
    that lives inside one process."""
    if value > 1 and _in_process_store(store):
        raise ValueError(
            f"{value} workers cannot share {store}: it lives inside one process, so each "
            "worker would keep sessions of its own; use sqlite:///path.db or "
            "redis://host:port/db, or one worker"
        )
    return value


def comma_parts(value: Any) -> list[str] | None:
    """The non-blank parts of a comma list (one string, as the environment gives it) or of a
    list of them, unstripped; None for any other value."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple) and all(isinstance(n, str) for n in value):
        return [part for n in value for part in n.split(",") if part.strip()]
    return None


def header_names(value: list[str]) -> list[str]:
    """The names when each is a valid HTTP header name; else ValueError naming a bad one."""
    for name in value:
        if not _HEADER_TOKEN.match(name):
            raise ValueError(f"{name!r} is not a valid HTTP header name")
    return value


def tenant_header(value: str) -> str:
    """A header name that may carry the tenant: valid, and not a credential header."""
    value = value.strip()
    if not _HEADER_TOKEN.match(value):
        raise ValueError(f"{value!r} is not a valid HTTP header name")
    if value.lower() in ("authorization", "x-api-key", "api-key"):
        raise ValueError("must not be a credential header (the credential is the default)")
    return value


def compactor_name(value: str) -> str:
    """A built-in compactor's short name or an import path `package.module:ClassName`."""
    if value not in BUILTIN_COMPACTORS and not _IMPORT_PATH.match(value):
        raise ValueError(
            f"must be one of {', '.join(BUILTIN_COMPACTORS)} "
            'or an import path like "package.module:ClassName"'
        )
    return value


def checked_prices(value: Any) -> Any:
    """The prices as given, once every entry of a mapping has at least an `input` price."""
    if isinstance(value, dict):
        for name, entry in value.items():
            if not isinstance(entry, dict) or "input" not in entry:
                raise ValueError(f"the price of {name!r} needs at least an input price")
    return value


def is_loopback(host: str) -> bool:
    """True when a bind address only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- host names ------------------------------------------------------------------------

_PORT = re.compile(r"^[0-9]{1,5}$")
# A registered name or a dotted IPv4 address: letters, digits, hyphens, dots, underscores.
_NAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")


def host_name(value: str) -> str | None:
    """The lower-cased name of a `Host` value without its port (`[::1]:80` -> `[::1]`), or
    None when the value is not exactly `host[:port]`."""
    if value.startswith("["):
        literal, closed, rest = value[1:].partition("]")
        if not closed or (rest and not (rest[0] == ":" and _PORT.match(rest[1:]))):
            return None
        try:
            address = ipaddress.IPv6Address(literal)
        except ValueError:
            return None
        return f"[{address.compressed}]"
    name, colon, port = value.rpartition(":")
    if not colon:
        name = value
    elif not _PORT.match(port):
        return None
    if name.endswith("."):  # a fully qualified name: `localhost.` is `localhost`
        name = name[:-1]
    if not _NAME.match(name) or ".." in name:
        return None
    return name.lower()


def is_loopback_name(name: str) -> bool:
    """True for a name `host_name` returned that reaches this machine only."""
    if name == "localhost":
        return True
    if name == "[::1]":
        return True
    try:
        return ipaddress.IPv4Address(name).is_loopback
    except ValueError:
        return False


def normalise_names(names: Iterable[str]) -> tuple[str, ...]:
    """Configured host names as `host_name` returns them; ValueError names a bad one."""
    kept: list[str] = []
    for raw in names:
        value = raw.strip()
        name = host_name(value)
        has_port = "]:" in value if value.startswith("[") else ":" in value
        if name is None or has_port:
            raise ValueError(
                f"{raw!r} is not a host name: give a name or an address without a port "
                "(any port is allowed; IPv6 in brackets)"
            )
        kept.append(name)
    return tuple(dict.fromkeys(kept))


def allowed_host(value: str, allowed: Iterable[str] = ()) -> bool:
    """True when a `Host` header value names a loopback name or one of `allowed`
    (normalised names, as `normalise_names` returns them)."""
    name = host_name(value)
    return name is not None and (is_loopback_name(name) or name in allowed)


def origin_host(origin: str) -> str | None:
    """The host part (with its port) of an `Origin` value, or None (`null`, or malformed)."""
    scheme, sep, rest = origin.partition("://")
    if not sep or not _SCHEME.match(scheme) or "/" in rest or "@" in rest:
        return None
    return rest


def allowed_origin(origin: str, allowed: Iterable[str] = ()) -> bool:
    """True when an `Origin` value's host is loopback or one of `allowed`."""
    host = origin_host(origin)
    return host is not None and allowed_host(host, allowed)


__all__ = [
    "BUILTIN_COMPACTORS",
    "allowed_host",
    "allowed_origin",
    "checked_prices",
    "clean_secret",
    "comma_parts",
    "compactor_name",
    "header_names",
    "host_name",
    "is_loopback",
    "is_loopback_name",
    "normalise_names",
    "origin_host",
    "store_url",
    "tenant_header",
    "upstream_url",
    "worker_count",
]
