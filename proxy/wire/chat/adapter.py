"""Chat Completions on the wire: the identity case of the neutral conversation.

Neutral messages are Chat Completions messages, so requests map onto them as they are; this
adapter adds the proxy's tool in the `tools` list, asks a stream for its usage, and renders
errors in OpenAI's shape. What a reply's round shows and the rounds merged into one completion
are `proxy.wire.chat.reply`, the stream relay that hides extract calls across rounds
`proxy.wire.chat.stream`, a whole completion answering a stream request
`proxy.wire.chat.whole`, and the shape checks on what the upstream answers
`proxy.wire.chat.checks`. Pure.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import InvalidRequest, UpstreamInvalidResponse, error_payload
from proxy.session.extract_tool import client_defines_tool, inject
from proxy.session.rebuild import Outgoing
from proxy.session.tool_output import chat_content
from proxy.wire.base import JSON, Round, json_object
from proxy.wire.chat import reply
from proxy.wire.chat.stream import ChatRelay


def parse_body(raw: bytes) -> JSON:
    return accept_body(json_object(raw))


def accept_body(body: JSON) -> JSON:
    """A parsed body, refused where OpenAI refuses it for the type of a field we read."""
    if not isinstance(body.get("messages"), list):
        raise InvalidRequest(
            "'messages' must be a list of messages.", param="messages", code="invalid_type"
        )
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest(
            "'stream_options' must be an object.", param="stream_options", code="invalid_type"
        )
    return body


class ChatWire:
    """`POST /v1/chat/completions`."""

    name = "chat"
    path = "/chat/completions"
    provider = "openai"
    history_field = "messages"

    def parse(self, raw: bytes) -> JSON:
        return parse_body(raw)

    def accept(self, body: JSON) -> JSON:
        return accept_body(body)

    def check(self, body: JSON) -> None:
        return None  # `parse` refuses what this API would

    def messages(self, body: JSON) -> list[JSON]:
        messages: list[JSON] = body["messages"]
        return messages

    def as_received(self, messages: list[JSON]) -> list[Any]:
        return messages

    def summary_tools(self, names: list[str]) -> list[JSON] | None:
        schema = {"type": "object"}
        tools = [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]
        return tools or None

    def tools(self, body: JSON) -> Any:
        return body.get("tools")

    def with_extract_tool(self, tools: Any) -> list[Any]:
        return inject(tools)

    def defines_extract_tool(self, tools: Any) -> bool:
        return client_defines_tool(tools)

    def provider_compacts(self, body: JSON) -> bool:
        return False  # Chat Completions has no compaction of the provider's own

    def can_inject(self, body: JSON) -> bool:
        n = body.get("n")
        return n is None or n == 1

    def cache_ttl(self, body: JSON) -> str | None:
        # OpenAI caches on its own, for minutes unless asked to keep it 24 h (the lifetime
        # counts in `proxy.compaction.cache_life`; the write price does not depend on it).
        return "24h" if body.get("prompt_cache_retention") == "24h" else None

    def upstream_body(self, body: JSON, out: Outgoing | None, tools: Any, *, stream: bool) -> JSON:
        sent = dict(body)
        if out is not None:
            sent["messages"] = out.messages
        if tools is not None:
            sent["tools"] = tools
        if stream:
            options = dict(sent.get("stream_options") or {})
            options["include_usage"] = True
            sent["stream_options"] = options
        return sent

    def continue_body(self, body: JSON, rnd: Round, results: list[JSON]) -> JSON:
        out = dict(body)
        # Tool messages carry text parts only: other parts of an answer become markers.
        answers = [{**r, "content": chat_content(r.get("content"))} for r in results]
        out["messages"] = [*body["messages"], rnd.message, *answers]
        return out

    def hidden_round(self, body: JSON, rnd: Round, *, stream: bool) -> tuple[JSON, Any]:
        """The round's message as `continue_body` sent it; what the client saw of it: a
        stream relays its text (and reasoning) before the next round's, a whole reply is
        the last round's alone."""
        shown = {}
        if stream:
            for name in ("content", "reasoning_content"):
                value = rnd.message.get(name)
                if isinstance(value, str) and value:
                    shown[name] = value
        return rnd.message, shown or None

    def unmerge(self, message: JSON, shown: Any) -> list[JSON] | None:
        """The client's echoed message without the text it saw streamed of a hidden round."""
        if not isinstance(shown, dict):
            return None
        out = dict(message)
        for name, text in shown.items():
            value = out.get(name)
            if value is None and name != "content":
                continue  # the client did not keep the reasoning it was streamed
            if not isinstance(value, str) or not isinstance(text, str):
                return None
            if not value.startswith(text):
                return None
            out[name] = value[len(text) :] or None
        return [out]

    def reply_round(self, data: Any) -> Round:
        return reply.reply_round(data)

    def client_reply(self, body: JSON, rounds: list[Round], *, injected: bool) -> JSON:
        return reply.client_reply(rounds, injected=injected)

    def stream_relay(self, body: JSON) -> ChatRelay:
        options = body.get("stream_options") or {}
        return ChatRelay(wants_usage=bool(options.get("include_usage")))

    def summary_body(self, body: JSON, chat_body: JSON) -> JSON:
        return chat_body

    def summary_reply(self, data: Any) -> JSON:
        if not isinstance(data, dict):
            raise UpstreamInvalidResponse()
        return data

    def error_body(
        self, status: int, message: str, type_: str, code: str | None, param: str | None = None
    ) -> JSON:
        return error_payload(message, type_, code, param)
