"""Pure checks of single setting values: keys (secrets) and bind addresses."""

from __future__ import annotations

import ipaddress


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


def is_loopback(host: str) -> bool:
    """True when a bind address only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


__all__ = ["clean_secret", "is_loopback"]
