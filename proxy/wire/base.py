"""What the turn pipeline asks of a wire format (Chat Completions, Responses, Messages).

The pipeline (`proxy.turn.pipeline`) knows sessions, compaction and the hidden extract loop; a
`Wire` knows one API's bodies, streams, usage and error shape. Between them travel neutral
messages: Chat Completions-shaped dicts that may carry the wire's own objects under `x_items`
(see `proxy.wire.chat.adapter` for the identity case). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from proxy.errors import DegradeError, InvalidRequest
from proxy.session.history import MAX_TOKEN_COUNT
from proxy.session.rebuild import Outgoing

JSON = dict[str, Any]


def json_object(raw: bytes) -> JSON:
    """A request body that must be a JSON object, refused in OpenAI's words otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc.msg}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body


@dataclass
class Usage:
    """One upstream round's usage, as the trigger and the cost model read it."""

    total: int | None = None  # the size the next request starts from
    prompt: int | None = None  # what the prompt was billed, cached part included
    cached: int | None = None  # the cached part of the prompt
    output: int | None = None  # what the reply was billed
    written: int | None = None  # the part of the prompt written into the cache (billed apart)

    def __post_init__(self) -> None:
        """Numbers the upstream cannot have meant are not numbers: each above
        `MAX_TOKEN_COUNT` (a prompt summed from parts), a cached or cache-written part larger
        than the prompt it is a part of, or both together (the prompt's count is kept), and
        either part of a prompt that is not known."""
        for name in ("total", "prompt", "cached", "output", "written"):
            value = getattr(self, name)
            if value is not None and value > MAX_TOKEN_COUNT:
                setattr(self, name, None)
        prompt = self.prompt
        if prompt is None or (self.cached or 0) > prompt:
            self.cached = None
        if prompt is None or (self.written or 0) + (self.cached or 0) > prompt:
            self.written = None


@dataclass
class Round:
    """What one upstream round asked for, in neutral form."""

    message: JSON  # the neutral assistant message (tool_calls in Chat Completions' shape)
    usage: Usage | None
    only_extract: bool  # it called the proxy's extract tool and nothing the client sees
    raw: Any = None  # the wire's own record of the round (a completion, a response's output)


class StreamRelay(Protocol):
    """Relays one client response that may span several upstream rounds."""

    def feed(self, event: str | None, data: str | None, raw: bytes) -> list[bytes]:
        """What to send the client for one upstream SSE event."""
        ...

    def end_round(self) -> Round:
        """The round just relayed; the next `feed` belongs to a new round."""
        ...

    def finish(self, *, hidden_last: bool) -> list[bytes]:
        """The closing events; `hidden_last` when the last round held only hidden calls."""
        ...

    def error(self, body: Any, detail: str | None = None) -> bytes:
        """An in-stream error event in this API's shape."""
        ...


class Unsupported(DegradeError):
    """A request this wire can serve only as a pass-through (e.g. server-held history)."""


class Wire(Protocol):
    """One API's side of a compacting turn."""

    name: str  # "chat", "responses", "messages": logs, metrics, the admin view
    path: str  # the upstream path, relative to that upstream's base URL
    provider: str  # "openai" or "anthropic": whose upstream and API key serve it
    history_field: str  # the body's field that holds the conversation

    def parse(self, raw: bytes) -> JSON:
        """The request body; raises InvalidRequest for what the API would refuse of it,
        except what `check` finds in its history, which `messages` finds too."""
        ...

    def accept(self, body: JSON) -> JSON:
        """What `parse` checks of the JSON object it read: the body, or InvalidRequest."""
        ...

    def check(self, body: JSON) -> None:
        """Raise InvalidRequest for a history the API would refuse (for a body that goes
        upstream as it came; `messages` checks the histories it converts)."""
        ...

    def messages(self, body: JSON) -> list[JSON]:
        """Neutral messages; raises UnrecognisedHistory (uncompacted) or Unsupported, and
        InvalidRequest as `check` does."""
        ...

    def as_received(self, messages: list[JSON]) -> list[Any]:
        """What the prefix hash reads for these neutral messages (`proxy.session.rebuild.rebuild`):
        the messages themselves, or the wire items each was made from, which determine it."""
        ...

    def tools(self, body: JSON) -> Any: ...

    def summary_tools(self, names: list[str]) -> list[JSON] | None:
        """Minimal definitions of the named tools, for a summary request that has no client
        body to take them from (some providers refuse tool messages without them); None
        where the API sends a summary's tool blocks as text instead."""
        ...

    def with_extract_tool(self, tools: Any) -> list[Any]: ...

    def defines_extract_tool(self, tools: Any) -> bool: ...

    def can_inject(self, body: JSON) -> bool:
        """Whether the proxy's tool may be added (e.g. not with several choices)."""
        ...

    def provider_compacts(self, body: JSON) -> bool:
        """Whether the request asks the provider to compact it (`proxy.wire.provider_compaction`):
        the proxy then compacts nothing of its own in it."""
        ...

    def cache_ttl(self, body: JSON) -> str | None:
        """The cache lifetime the request asks for where the API lets it ("5m", "1h"; "24h",
        OpenAI's `prompt_cache_retention`): it sets the price of cache writes
        (`proxy.compaction.economics.write_factor_for`) and how long the cache stays warm
        (`proxy.compaction.cache_life`)."""
        ...

    def upstream_body(self, body: JSON, out: Outgoing | None, tools: Any, *, stream: bool) -> JSON:
        """The body sent upstream (`out` None: the client's messages unchanged)."""
        ...

    def continue_body(self, body: JSON, rnd: Round, results: list[JSON]) -> JSON:
        """The next round's body: this round's output and the proxy's extract answers added."""
        ...

    def hidden_round(self, body: JSON, rnd: Round, *, stream: bool) -> tuple[JSON, Any]:
        """An only-extract round as later requests carry it again: the neutral message that
        converts back to what `continue_body` sent of it, and what the client saw of it
        (falsy: nothing), which `unmerge` splits off the client's echo."""
        ...

    def unmerge(self, message: JSON, shown: Any) -> list[JSON] | None:
        """The client's echoed assistant message without what it saw of a hidden round
        first (`shown`, from `hidden_round`): [] when nothing is left, None when the
        message does not start with it."""
        ...

    def reply_round(self, data: Any) -> Round:
        """A non-streamed reply as a round; raises UpstreamInvalidResponse when unreadable."""
        ...

    def client_reply(self, body: JSON, rounds: list[Round], *, injected: bool) -> JSON:
        """The one reply the client sees: hidden calls gone, usage summed."""
        ...

    def stream_relay(self, body: JSON) -> StreamRelay: ...

    def summary_body(self, body: JSON, chat_body: JSON) -> JSON:
        """A Chat Completions-shaped summary request in this API (`body`: the client's)."""
        ...

    def summary_reply(self, data: Any) -> JSON:
        """This API's reply to a summary request as a Chat Completions completion."""
        ...

    def error_body(
        self, status: int, message: str, type_: str, code: str | None, param: str | None = None
    ) -> JSON:
        """An error body in this API's shape."""
        ...


def tools_block_chars(wire: Wire, body: JSON) -> int:
    """Characters of the tools block a compaction leaves upstream: the client's tools (in
    `body`) with the proxy's extract tool, which a compaction adds if it is not there yet."""
    tools = wire.tools(body)
    if not isinstance(tools, list):
        return 0
    if tools and not wire.defines_extract_tool(tools):
        tools = wire.with_extract_tool(tools)
    try:
        return len(orjson.dumps(tools))
    except TypeError:
        return 0  # not JSON (the wire refuses it later): nothing to count
