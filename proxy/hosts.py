"""Which `Host` and `Origin` names a request may carry: one exact parser for every check.

A `Host` header is `host [":" port]` (RFC 9110, 7.2): `host` is a bracketed IPv6 literal, a
dotted IPv4 address or a registered name; `port` is digits. `host_name` returns the name, or
None for anything else, so `[::1].evil.com`, `127.0.0.1.evil.com` or `localhost:80:80` never
reads as a loopback name. A name is loopback when it is `localhost`, an address in
127.0.0.0/8 or `[::1]`; `allowed_host` also accepts the names an operator configured
(`server.allowed_hosts`), in any case and with any port. An `Origin` (`scheme://host[:port]`)
is judged by its host the same way; the opaque origin `null` is never allowed.

Pure: no I/O, used by the admin routes (`proxy.admin.base`) and by the checks that
guard an operator's own upstream key (`proxy.server.origin`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

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
    "allowed_host",
    "allowed_origin",
    "host_name",
    "is_loopback_name",
    "normalise_names",
    "origin_host",
]
