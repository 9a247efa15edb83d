"""What an upstream Responses round produced, and several rounds merged into one response.

The proxy may answer the model's `extract_compacted_tool_result` calls itself and ask upstream
again; the client must see one response. Here: which items of a round the client may see
(`hidden_indexes`: never an extract call, nor reasoning that led only to one, since a reasoning
item must not reach a client without the item that follows it), a round's result in the
pipeline's terms (`to_round`), usage summed over rounds, and `merge_responses`, the one
non-streamed response. `proxy.wire.responses.stream` applies the same rules to a stream.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.session.history import UnrecognisedHistory, token_count
from proxy.wire.base import Round, Usage
from proxy.wire.responses.to_neutral import X_ITEMS, output_to_message
from proxy.wire.responses.tool import is_extract_item, is_extract_tool
from proxy.wire.usage import RESPONSES, usage_sum


def _is_reasoning(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"


def _is_call(item: Any) -> bool:
    """An item the client must act on (and answer with an output)."""
    return isinstance(item, dict) and isinstance(item.get("call_id"), str)


def hidden_indexes(output: list[Any], hide_extract: bool = True) -> set[int]:
    """Positions of an output the client must not see: extract calls, and, in a round that
    made one, reasoning items that no visible item follows (they led to the hidden calls)."""
    hidden: set[int] = set()
    held: list[int] = []  # reasoning items not yet followed by a visible item
    for i, item in enumerate(output):
        if hide_extract and is_extract_item(item):
            hidden.add(i)
        elif _is_reasoning(item):
            held.append(i)
        else:
            held = []
    return hidden | set(held) if hidden else hidden


@dataclass
class RoundResult:
    """What one upstream round produced, for the pipeline to decide what follows."""

    output: list[Any]  # every item, upstream order: the next request's input gets them
    visible: list[Any]  # what the client saw of them
    hidden: list[Any]  # extract calls and the reasoning that led to them
    extract_calls: list[dict[str, Any]]
    only_extract: bool  # extract calls and nothing the client must answer: ask again
    usage: dict[str, Any] | None
    status: str | None  # completed, incomplete, failed; None when the stream just ended
    response: dict[str, Any] | None = None  # the round's final response object, as sent


def round_result(
    output: list[Any], hidden: set[int], order: list[int], status: str | None, response: Any
) -> RoundResult:
    visible = [output[i] for i in order if i < len(output)]
    hidden_items = [output[i] for i in sorted(hidden) if i < len(output)]
    extract = [x for x in hidden_items if is_extract_item(x)]
    response = response if isinstance(response, dict) else None
    usage = response.get("usage") if response else None
    return RoundResult(
        output=[x for x in output if x is not None],
        visible=visible,
        hidden=hidden_items,
        extract_calls=extract,
        only_extract=status == "completed" and bool(extract) and not any(map(_is_call, visible)),
        usage=usage if isinstance(usage, dict) else None,
        status=status,
        response=response,
    )


def round_of(response: dict[str, Any], hide_extract: bool = True) -> RoundResult:
    """A non-streamed round's result."""
    output = response.get("output")
    output = output if isinstance(output, list) else []
    hidden = hidden_indexes(output, hide_extract)
    order = [i for i in range(len(output)) if i not in hidden]
    status = response.get("status")
    return round_result(
        output, hidden, order, status if isinstance(status, str) else None, response
    )


def client_view(
    response: dict[str, Any], client_fields: Mapping[str, Any] | None, hide_extract: bool
) -> dict[str, Any]:
    """A response object as the client may see it: our tool out of `tools`, and the
    client's own values (its `instructions`, say) put back where the proxy changed them."""
    tools = response.get("tools")
    if hide_extract and isinstance(tools, list) and any(map(is_extract_tool, tools)):
        response = {**response, "tools": [t for t in tools if not is_extract_tool(t)]}
    if client_fields:
        response = {**response, **client_fields}
    return response


def merge_responses(
    rounds: list[dict[str, Any]],
    *,
    hide_extract: bool = True,
    client_fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The one non-streamed response the client sees for several upstream rounds."""
    if not rounds:
        raise ValueError("merge_responses needs at least one round")
    merged = dict(rounds[-1])
    for key in ("id", "created_at"):
        if key in rounds[0]:
            merged[key] = rounds[0][key]
    results = [round_of(r, hide_extract) for r in rounds]
    merged["output"] = [item for r in results for item in r.visible]
    usage = usage_sum([r.usage for r in results], RESPONSES)
    if usage is not None:
        merged["usage"] = usage
    return client_view(merged, client_fields, hide_extract)


def usage_of(usage: Any) -> Usage | None:
    """Responses usage as the trigger and the cost model read it; None when absent."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details")
    if not isinstance(details, dict):
        details = {}
    prompt, output = token_count(usage.get("input_tokens")), token_count(usage.get("output_tokens"))
    total = token_count(usage.get("total_tokens"))
    if total is None and prompt is not None and output is not None:
        total = prompt + output
    cached, written = details.get("cached_tokens"), details.get("cache_write_tokens")
    return Usage(total, prompt, token_count(cached), output, token_count(written))


def shown_items(raw: Any) -> list[list[Any]] | None:
    """(type, id) of each item the client saw of a round (`raw`: a response or a relayed
    round's result): `merge_responses` and the stream put them before the next round's."""
    result = raw if isinstance(raw, RoundResult) else round_of(raw if isinstance(raw, dict) else {})
    shown = [[_kind(x), x.get("id")] for x in result.visible if isinstance(x, dict)]
    return shown or None


def _kind(item: dict[str, Any]) -> Any:
    return item.get("type") or ("message" if "role" in item else None)


def unmerge(message: dict[str, Any], shown: Any) -> list[dict[str, Any]] | None:
    """The client's echoed run of output items without the ones it saw of a hidden round."""
    items = message.get(X_ITEMS)
    if not isinstance(shown, list) or not isinstance(items, list) or len(items) < len(shown):
        return None
    for item, (kind, item_id) in zip(items, shown, strict=False):
        if not isinstance(item, dict) or _kind(item) != kind:
            return None
        if item_id is not None and item.get("id") not in (None, item_id):
            return None
    rest = items[len(shown) :]
    if not rest:
        return []
    try:
        return [output_to_message(rest)]
    except UnrecognisedHistory:
        return None


def to_round(result: RoundResult) -> Round:
    """A round as the pipeline reads it: its output as one neutral assistant message (the
    extract calls among its tool_calls), its usage, and the result itself as `raw`."""
    items = [x for x in result.output if isinstance(x, dict)]
    try:
        message = output_to_message(items)
    except UnrecognisedHistory:  # a malformed call: nothing the proxy could answer
        message = {"role": "assistant", "content": None, X_ITEMS: items}
    return Round(message, usage_of(result.usage), result.only_extract, raw=result)
