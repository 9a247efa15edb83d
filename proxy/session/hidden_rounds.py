"""The proxy's hidden extract rounds, kept in place: what a session stores of them, and
how a later request gets them back.

When the model calls only `extract_compacted_tool_result`, the proxy answers and asks
upstream again within the same client request; when it calls it beside the client's own
tools, the client gets only its own calls. Either way the model wrote what follows with
the hidden call and its answer before it, so later requests must carry them again, at
their place, byte for byte (its thinking is signed over that prefix, and its cache is):

- an only-extract round goes back before the assistant message the client echoes for the
  turn, as the upstream sent it, followed by the proxy's answers; the wire splits off the
  front of the client's echo what the client saw of that round (`Wire.unmerge`);
- extract calls made beside the client's own go back into that message, their answers
  before the client's results (`proxy.session.state.HiddenExtract`).

The answers are never stored: they are originals of tool results the client sends anyway.
A round keeps its calls and a digest of each answer; a later request re-derives the answer
from its own messages, and when it no longer gives the same bytes (the original is gone or
changed) the round is dropped, and the client's message goes up as it sent it.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from proxy.session.extract_tool import answer_content, split_calls
from proxy.session.history import HIDDEN_KEY_PREFIX

JSON = dict[str, Any]

# What a wire's `unmerge` does: the client's echoed message without what it saw of one
# hidden round (`shown`): [] when nothing is left of it, None when it does not start so.
Unmerge = Callable[[dict[str, Any], Any], list[dict[str, Any]] | None]


def answer_messages(
    calls: Sequence[Mapping[str, Any]], originals: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The proxy's answers to extract calls, as tool messages (neutral form)."""
    return [
        {"role": "tool", "tool_call_id": c.get("id"), "content": answer_content(c, originals)}
        for c in calls
    ]


def digest(content: Any) -> str:
    """A short digest of an answer's content: what a round stores instead of the answer."""
    return hashlib.sha256(orjson.dumps(content)).hexdigest()[:32]


def result_key(result: Mapping[str, Any]) -> str:
    """The reclaim key of one of the proxy's answers (the compactor may reclaim it)."""
    return HIDDEN_KEY_PREFIX + str(result.get("tool_call_id"))


def round_entry(message: dict[str, Any], shown: Any, results: list[dict[str, Any]]) -> JSON:
    """What the session stores of an only-extract round: the model's message as the upstream
    got it back, what the client saw of it, and a digest of each answer."""
    return {
        "message": message,
        "shown": shown,
        "digests": [digest(r.get("content")) for r in results],
    }


def extract_calls(message: Mapping[str, Any]) -> list[JSON]:
    """The extract calls among a neutral message's tool calls."""
    return split_calls(message.get("tool_calls"))[1]


def rederive(
    calls: Sequence[Mapping[str, Any]], digests: Sequence[str], originals: dict[str, Any]
) -> list[JSON] | None:
    """The answers again from `originals`, or None when one no longer matches its digest.

    Each answer found is added to `originals` under its key, as the proxy's answers were
    when the model could ask for one of them."""
    results = answer_messages(calls, originals)
    if len(results) != len(digests):
        return None
    if any(digest(r["content"]) != d for r, d in zip(results, digests, strict=True)):
        return None
    for r in results:
        originals[result_key(r)] = r["content"]
    return results


def unmerge_all(
    message: dict[str, Any], rounds: Sequence[Mapping[str, Any]], unmerge: Unmerge | None
) -> list[JSON] | None:
    """The client's echoed message without what it saw of each hidden round, in order."""
    left: list[JSON] = [message]
    for rnd in rounds:
        shown = rnd.get("shown")
        if not shown:
            continue
        if not left or unmerge is None:
            return None
        found = unmerge(left[0], shown)
        if found is None:
            return None
        left = found
    return left


__all__ = [
    "Unmerge",
    "answer_messages",
    "digest",
    "extract_calls",
    "rederive",
    "result_key",
    "round_entry",
    "unmerge_all",
]
