"""The wire adapters by the name a session notes of its API (`Wire.name`)."""

from __future__ import annotations

from proxy.wire.base import Wire
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.messages.adapter import MessagesWire
from proxy.wire.responses.adapter import ResponsesWire

_WIRES: dict[str, type[ChatWire] | type[ResponsesWire] | type[MessagesWire]] = {
    wire.name: wire for wire in (ChatWire, ResponsesWire, MessagesWire)
}


def wire_named(name: str | None) -> Wire:
    """The adapter of a session's API (sessions saved before the proxy noted it: chat)."""
    return _WIRES.get(name or ChatWire.name, ChatWire)()
