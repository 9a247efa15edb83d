"""The Responses API on the wire, stateless mode (the whole history in `input`).

Items map onto neutral messages in `proxy.wire.responses.to_neutral` (every original item rides
along and goes back byte for byte, reasoning `encrypted_content` included); the stream relay
that hides the proxy's extract calls across rounds is `proxy.wire.responses.stream`, the
rule of what a round shows `proxy.wire.responses.reply`, the bodies the proxy writes itself
`proxy.wire.responses.bodies`, and its extract tool in this API's shape
`proxy.wire.responses.tool`. A request that names `previous_response_id` or a
server-side `conversation` keeps its history on the provider's side, where the proxy cannot
compact it: it passes through unchanged (`x-xun-compaction: unsupported`). Pure.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import InvalidRequest, UpstreamInvalidResponse, error_payload
from proxy.session.rebuild import Outgoing
from proxy.wire.base import JSON, Round, Unsupported, json_object
from proxy.wire.provider_compaction import asks_responses
from proxy.wire.responses import to_neutral as items
from proxy.wire.responses import tool
from proxy.wire.responses.bodies import summary_reply, summary_request, untied, upstream_input
from proxy.wire.responses.from_neutral import output_value
from proxy.wire.responses.reply import merge_responses, round_of, shown_items, to_round, unmerge
from proxy.wire.responses.stream import ResponsesRelay
from proxy.wire.responses.to_neutral import output_to_message


def _invalid_type(param: str, expected: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}.", param=param, code="invalid_type"
    )


def parse_body(raw: bytes) -> JSON:
    """The request body; what OpenAI would refuse for its type is refused here the same way."""
    return accept_body(json_object(raw))


def accept_body(body: JSON) -> JSON:
    """A parsed body, refused as `parse_body` refuses it."""
    if not isinstance(body.get("input", ""), str | list):
        raise _invalid_type("input", "a string or an array of input items")
    if not isinstance(body.get("instructions", ""), str | None):
        raise _invalid_type("instructions", "a string")
    if not isinstance(body.get("tools", []), list | None):
        raise _invalid_type("tools", "an array")
    return body


def input_items(body: JSON) -> list[Any]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def replayable(body: JSON, output: list[Any]) -> list[Any]:
    """A round's output as the next round's input. With `store: false` the provider keeps
    nothing, so a reasoning item it sent without `encrypted_content` (the client did not ask
    for it in `include`) cannot be sent back: it goes, and the ids that would tie the other
    items to it go too (as a summary request drops them)."""
    if body.get("store") is not False or not any(_bare_reasoning(x) for x in output):
        return output
    return [untied(x) for x in output if not _bare_reasoning(x)]


def _bare_reasoning(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "reasoning"
        and not item.get("encrypted_content")
    )


def _client_fields(body: JSON) -> dict[str, Any]:
    """Request fields a response echoes, as the client sent them (not as sent upstream)."""
    return {"instructions": body.get("instructions"), "tools": body.get("tools")}


class Relay(ResponsesRelay):
    """The Responses event relay as the pipeline's `StreamRelay`."""

    def end_round(self) -> Round:  # type: ignore[override]
        return to_round(super().end_round())


class ResponsesWire:
    """`POST /v1/responses`."""

    name = "responses"
    path = "/responses"
    provider = "openai"
    history_field = "input"

    def parse(self, raw: bytes) -> JSON:
        return parse_body(raw)

    def accept(self, body: JSON) -> JSON:
        return accept_body(body)

    def check(self, body: JSON) -> None:
        return None  # `parse` refuses what this API would

    def messages(self, body: JSON) -> list[JSON]:
        return self.convert_after(body, None)[0]

    def convert_after(self, body: JSON, before: Any) -> tuple[list[JSON], items.Converted]:
        """`messages`, going on from an earlier request's conversion of a first part of
        these items (`proxy.wire.neutral_reuse`)."""
        if body.get("previous_response_id") or body.get("conversation"):
            raise Unsupported("the history is held on the provider's side")
        previous = before if isinstance(before, items.Converted) else None
        converted = items.convert(input_items(body), previous)
        return converted.neutral, converted

    def as_received(self, messages: list[JSON]) -> list[Any]:
        # Half the bytes of the neutral messages, which carry them and what came of them.
        return [m.get(items.X_ITEMS, m) if isinstance(m, dict) else m for m in messages]

    def summary_tools(self, names: list[str]) -> list[JSON] | None:
        schema = {"type": "object"}
        return [{"type": "function", "name": n, "parameters": schema} for n in names] or None

    def tools(self, body: JSON) -> Any:
        return body.get("tools")

    def with_extract_tool(self, tools: Any) -> list[Any]:
        return tool.inject_tool(tools)

    def defines_extract_tool(self, tools: Any) -> bool:
        return tool.client_defines_tool(tools)

    def can_inject(self, body: JSON) -> bool:
        return True

    def provider_compacts(self, body: JSON) -> bool:
        return asks_responses(body)

    def cache_ttl(self, body: JSON) -> str | None:
        # OpenAI caches on its own, for minutes unless asked to keep it 24 h (the lifetime
        # counts in `proxy.compaction.cache_life`; the write price does not depend on it).
        return "24h" if body.get("prompt_cache_retention") == "24h" else None

    def upstream_body(self, body: JSON, out: Outgoing | None, tools: Any, *, stream: bool) -> JSON:
        sent = dict(body)
        if out is None:
            return sent
        if out.unchanged:
            # Nothing applies: the client's items as they came, which is what converting
            # the neutral messages back gives, byte for byte, without its cost.
            sent["input"] = input_items(body)
            if tools is not None:
                sent["tools"] = tools
            return sent
        instructions, sent["input"] = upstream_input(out, body.get("instructions"))
        if instructions is not None:
            sent["instructions"] = instructions
        if tools is not None:
            sent["tools"] = tools
        return sent

    def continue_body(self, body: JSON, rnd: Round, results: list[JSON]) -> JSON:
        sent = dict(body)
        answers = [
            {
                "type": "function_call_output",
                "call_id": r.get("tool_call_id"),
                "output": output_value(r.get("content")),
            }
            for r in results
        ]
        sent["input"] = [*input_items(body), *replayable(body, self.round_output(rnd)), *answers]
        return sent

    def hidden_round(self, body: JSON, rnd: Round, *, stream: bool) -> tuple[JSON, Any]:
        """The round's output as `continue_body` sent it, and the items the client saw."""
        sent = replayable(body, self.round_output(rnd))
        return output_to_message(sent), shown_items(rnd.raw)

    def unmerge(self, message: JSON, shown: Any) -> list[JSON] | None:
        return unmerge(message, shown)

    def reply_round(self, data: Any) -> Round:
        if not isinstance(data, dict) or not isinstance(data.get("output", []), list):
            raise UpstreamInvalidResponse()
        if not all(isinstance(x, dict) for x in data.get("output") or []):
            raise UpstreamInvalidResponse()
        rnd = to_round(round_of(data))
        rnd.raw = data
        return rnd

    @staticmethod
    def round_output(rnd: Round) -> list[Any]:
        """A round's output items (a non-streamed reply, or a relayed round's result)."""
        raw = rnd.raw
        output = raw.get("output") if isinstance(raw, dict) else raw.output
        return [x for x in output or [] if isinstance(x, dict)]

    def client_reply(self, body: JSON, rounds: list[Round], *, injected: bool) -> JSON:
        if not injected:
            reply: JSON = rounds[-1].raw
            return reply
        return merge_responses([r.raw for r in rounds], client_fields=_client_fields(body))

    def stream_relay(self, body: JSON) -> Relay:
        hide = not tool.client_defines_tool(body.get("tools"))
        return Relay(hide_extract=hide, client_fields=_client_fields(body))

    def summary_body(self, body: JSON, chat_body: JSON) -> JSON:
        """The summary request; reasoning goes along only to the session's own model, and
        never an item the provider would have to look up (with `store: false` it cannot)."""
        same_model = chat_body.get("model") == body.get("model")
        sent = summary_request(chat_body, keep_reasoning=same_model)
        sent["input"] = [
            x
            for x in sent["input"]
            if not (
                isinstance(x, dict)
                and (
                    x.get("type") == "item_reference"
                    or (x.get("type") == "reasoning" and not x.get("encrypted_content"))
                )
            )
        ]
        return sent

    def summary_reply(self, data: Any) -> JSON:
        if not isinstance(data, dict) or not isinstance(data.get("output"), list):
            raise UpstreamInvalidResponse()
        return summary_reply(data)

    def error_body(
        self, status: int, message: str, type_: str, code: str | None, param: str | None = None
    ) -> JSON:
        return error_payload(message, type_, code, param)
