"""A whole Responses answer to a stream request, as the events the API would have streamed.

Some OpenAI-compatible servers and gateways ignore `stream` and answer with the Response
object. `whole_events` turns that body into the events the Responses API streams for it:
`response.created`, `response.in_progress`, each output item `added` (its content parts,
text and call arguments each in one delta) and `done`, then `response.completed` (or
`response.failed` / `response.incomplete`, as its status says). The relay then handles them
as any stream, so indexes, sequence numbers and hidden extract calls follow its rules. A body
that is not a response becomes one `error` event. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

Event = tuple[str, dict[str, Any]]

NOT_A_RESPONSE = (
    "The upstream API answered a stream request with a body that is neither an event stream "
    "nor a response."
)


def whole_events(raw: bytes) -> list[Event]:
    """The events for one upstream body, each with its `type` and a `sequence_number`
    (the relay numbers them again)."""
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if _is_response(data):
        events = response_events(data)
    else:
        events = [("error", error_data(data))]
    return [(name, {"type": name, "sequence_number": 0, **body}) for name, body in events]


def _is_response(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("object", "response") != "response":
        return False
    output = data.get("output")
    return isinstance(output, list) and all(isinstance(x, dict) for x in output)


def error_data(data: Any) -> dict[str, Any]:
    """An `error` event's fields: the upstream's own error when the body is one."""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        code, param = error.get("code"), error.get("param")
        return {
            "code": code if isinstance(code, str) else None,
            "message": error["message"],
            "param": param if isinstance(param, str) else None,
        }
    return {"code": "upstream_invalid_response", "message": NOT_A_RESPONSE, "param": None}


def response_events(response: dict[str, Any]) -> list[Event]:
    """A response's stream, from `response.created` to its terminal event."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    for key in ("error", "incomplete_details"):
        if key in pending:
            pending[key] = None
    events: list[Event] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending}),
    ]
    for index, item in enumerate(response["output"]):
        events.extend(item_events(index, item))
    status = response.get("status")
    if status in ("completed", None):
        events.append(("response.completed", {"response": response}))
    elif status == "failed":
        events.append(("response.failed", {"response": response}))
    else:  # incomplete, cancelled, or a response that was not finished
        events.append(("response.incomplete", {"response": response}))
    return events


def item_events(index: int, item: dict[str, Any]) -> list[Event]:
    """One output item: `added` (empty of what the deltas carry), its deltas, `done`."""
    item_id = item.get("id")
    at = {"item_id": item_id if isinstance(item_id, str) else "", "output_index": index}
    kind, content, arguments = item.get("type"), item.get("content"), item.get("arguments")
    events: list[Event] = []
    if kind == "message" and isinstance(content, list):
        opened = {**item, "status": "in_progress", "content": []}
        events.append(("response.output_item.added", {"output_index": index, "item": opened}))
        for n, part in enumerate(content):
            events.extend(part_events({**at, "content_index": n}, part))
    elif kind == "function_call" and isinstance(arguments, str):
        opened = {**item, "status": "in_progress", "arguments": ""}
        events.append(("response.output_item.added", {"output_index": index, "item": opened}))
        if arguments:
            events.append(("response.function_call_arguments.delta", {**at, "delta": arguments}))
        events.append(("response.function_call_arguments.done", {**at, "arguments": arguments}))
    else:  # reasoning and the rest: whole in `added` and in `done`
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
    events.append(("response.output_item.done", {"output_index": index, "item": item}))
    return events


def part_events(at: dict[str, Any], part: Any) -> list[Event]:
    """One content part of a message: `added` empty, its text in one delta, `done`."""
    if not isinstance(part, dict):
        return []
    kind, text, refusal = part.get("type"), part.get("text"), part.get("refusal")
    events: list[Event] = []
    if kind == "output_text" and isinstance(text, str):
        logprobs = part.get("logprobs")
        logprobs = logprobs if isinstance(logprobs, list) else []
        empty = {**part, "text": ""}
        if "logprobs" in part:
            empty["logprobs"] = []
        events.append(("response.content_part.added", {**at, "part": empty}))
        if text:
            delta = {**at, "delta": text, "logprobs": logprobs}
            events.append(("response.output_text.delta", delta))
        done = {**at, "text": text, "logprobs": logprobs}
        events.append(("response.output_text.done", done))
    elif kind == "refusal" and isinstance(refusal, str):
        events.append(("response.content_part.added", {**at, "part": {**part, "refusal": ""}}))
        if refusal:
            events.append(("response.refusal.delta", {**at, "delta": refusal}))
        events.append(("response.refusal.done", {**at, "refusal": refusal}))
    else:
        events.append(("response.content_part.added", {**at, "part": part}))
    events.append(("response.content_part.done", {**at, "part": part}))
    return events
