"""Anthropic's Messages API on the wire (`POST /v1/messages`, as Claude Code sends it).

Blocks map onto neutral messages in `proxy.wire.messages.to_neutral` and back in
`proxy.wire.messages.from_neutral` (every original block rides along and goes back byte for byte,
thinking signatures included); what Anthropic would refuse is found by
`proxy.wire.messages.checks`; the bodies the proxy sends (the summary after the client's
`system` blocks, at most 4 cache breakpoints, summary requests) are
`proxy.wire.messages.bodies`, replies and usage `proxy.wire.messages.reply`, and the stream
relay that hides extract `tool_use` blocks across rounds `proxy.wire.messages.stream`. Errors
take Anthropic's shape. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import InvalidRequest, UpstreamInvalidResponse
from proxy.session.rebuild import Outgoing
from proxy.wire.base import JSON, Round
from proxy.wire.messages import binding, bodies, reply
from proxy.wire.messages.checks import Checked, checked, request_error
from proxy.wire.messages.stream import MessagesRelay
from proxy.wire.messages.to_neutral import X_ITEMS, Converted, convert
from proxy.wire.provider_compaction import asks_messages


def parse_object(raw: bytes) -> JSON:
    """The request body as a JSON object, its history not yet checked (`refuse`)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc.msg}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return body


def refuse(body: JSON, before: Checked | None = None) -> Checked | None:
    """Raise InvalidRequest for a body Anthropic would refuse; else how far the fast check
    got (`proxy.wire.messages.checks.checked`, going on from `before`), None if it was not
    the one that decided."""
    done = checked(body, before)
    if done is None:
        problem = request_error(body)
        if problem is not None:
            raise InvalidRequest(problem)
    return done


@dataclass(frozen=True)
class _Kept:
    """What a later request of the session goes on from (`proxy.wire.neutral_reuse`)."""

    converted: Converted
    checked: Checked | None


class MessagesWire:
    """`POST /v1/messages`, sent to `upstream.anthropic_base_url`."""

    name = "messages"
    path = "/messages"
    provider = "anthropic"
    history_field = "messages"

    def parse(self, raw: bytes) -> JSON:
        # The history is checked as it is converted (`convert_after`), or by `check`.
        return parse_object(raw)

    def accept(self, body: JSON) -> JSON:
        return body  # a JSON object is all `parse` asks

    def check(self, body: JSON) -> None:
        refuse(body)

    def messages(self, body: JSON) -> list[JSON]:
        return self.convert_after(body, None)[0]

    def convert_after(self, body: JSON, before: Any) -> tuple[list[JSON], _Kept]:
        """`messages`, going on from an earlier request's conversion of the same `system`
        and of a first part of these messages (`proxy.wire.neutral_reuse`); what Anthropic would
        refuse is refused first (InvalidRequest), the part checked before not looked at."""
        kept = before if isinstance(before, _Kept) else None
        done = refuse(body, kept.checked if kept else None)
        previous = kept.converted if kept else None
        converted = convert(body.get("system"), body.get("messages"), previous)
        return converted.neutral, _Kept(converted, done)

    def as_received(self, messages: list[JSON]) -> list[Any]:
        # Half the bytes of the neutral messages, which carry them and what came of them.
        return [m.get(X_ITEMS, m) if isinstance(m, dict) else m for m in messages]

    def summary_tools(self, names: list[str]) -> list[JSON] | None:
        return None  # a Messages summary sends its tool blocks as text

    def tools(self, body: JSON) -> Any:
        return body.get("tools")

    def with_extract_tool(self, tools: Any) -> list[Any]:
        return bodies.inject_tool(tools)

    def defines_extract_tool(self, tools: Any) -> bool:
        return bodies.client_defines_tool(tools)

    def can_inject(self, body: JSON) -> bool:
        return True

    def provider_compacts(self, body: JSON) -> bool:
        return asks_messages(body)

    def cache_ttl(self, body: JSON) -> str | None:
        return bodies.cache_ttl(body)

    def upstream_body(self, body: JSON, out: Outgoing | None, tools: Any, *, stream: bool) -> JSON:
        return bodies.upstream_body(body, out, tools, stream=stream)

    def continue_body(self, body: JSON, rnd: Round, results: list[JSON]) -> JSON:
        return bodies.continue_body(body, rnd, results)

    def bind_thinking(
        self,
        body: JSON,
        bindings: dict[str, str],
        *,
        trust_unknown: bool,
        walked: binding.Walked | None = None,
    ) -> binding.Bound | None:
        """`body` without thinking blocks bound to another prefix (`proxy.wire.messages.binding`),
        None for a model that does not check them."""
        if not binding.checks_prefixes(body.get("model")):
            return None
        return binding.bind(body, bindings, trust_unknown=trust_unknown, walked=walked)

    def reply_bindings(self, bound: binding.Bound, rnd: Round) -> dict[str, str]:
        """The prefix each thinking block of a round's reply was written under."""
        raw = rnd.raw if isinstance(rnd.raw, dict) else {}
        return binding.reply_bindings(bound.tail, raw.get("content"))

    def hidden_round(self, body: JSON, rnd: Round, *, stream: bool) -> tuple[JSON, Any]:
        return reply.hidden_round(rnd)

    def unmerge(self, message: JSON, shown: Any) -> list[JSON] | None:
        return reply.unmerge(message, shown)

    def reply_round(self, data: Any) -> Round:
        try:
            return reply.reply_round(data)
        except reply.UnreadableReply as exc:
            raise UpstreamInvalidResponse() from exc

    def client_reply(self, body: JSON, rounds: list[Round], *, injected: bool) -> JSON:
        return reply.client_reply(rounds, injected=injected)

    def stream_relay(self, body: JSON) -> MessagesRelay:
        return MessagesRelay(hide=not bodies.client_defines_tool(body.get("tools")))

    def summary_body(self, body: JSON, chat_body: JSON) -> JSON:
        return bodies.summary_body(body, chat_body)

    def summary_reply(self, data: Any) -> JSON:
        try:
            return reply.summary_reply(data)
        except reply.UnreadableReply as exc:
            raise UpstreamInvalidResponse() from exc

    def error_body(
        self, status: int, message: str, type_: str, code: str | None, param: str | None = None
    ) -> JSON:
        return bodies.error_body(status, message, type_, code)
