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

The answers are never stored: they are originals, or searches over messages, the client
sends anyway. A round keeps its calls, a digest of each answer and, for a search, the ids of
its hits (`proxy.session.lookback.SearchScope`); a later request re-derives the answer from its
own messages, and when it no longer gives the same bytes (the original is gone or
changed) the round is dropped, and the client's message goes up as it sent it.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.session.extract_tool import answer_call, split_calls
from proxy.session.history import HIDDEN_KEY_PREFIX
from proxy.session.lookback import Lookback, Rebuilt, SearchScope, lookback_of

JSON = dict[str, Any]

# What a wire's `unmerge` does: the client's echoed message without what it saw of one
# hidden round (`shown`): [] when nothing is left of it, None when it does not start so.
Unmerge = Callable[[dict[str, Any], Any], list[dict[str, Any]] | None]


def answers(
    calls: Sequence[Mapping[str, Any]],
    book: Lookback,
    scopes: Sequence[SearchScope | None] | None = None,
) -> tuple[list[dict[str, Any]], list[SearchScope | None]]:
    """The proxy's answers to extract calls, as tool messages (neutral form), and each one's
    search scope (None for a read): `scopes` given, the recorded searches answered again."""
    messages: list[dict[str, Any]] = []
    found: list[SearchScope | None] = []
    for n, call in enumerate(calls):
        recorded = scopes[n] if scopes is not None and n < len(scopes) else None
        content, scope = answer_call(call, book, recorded)
        messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": content})
        found.append(scope)
    return messages, found


@dataclass
class Answered:
    """One client request's answers to extract calls: each search's scope by call id, kept
    for the record of the round it answered (`round_entry`, `proxy.session.state.add_hidden`)."""

    by_call: dict[str, SearchScope | None] = field(default_factory=dict)

    def answer(self, calls: Sequence[Mapping[str, Any]], rb: Rebuilt | None) -> list[JSON]:
        """Answers from the rebuilt request (`proxy.session.rebuild.Rebuild`), if there is one."""
        results, scopes = answers(calls, lookback_of(rb) if rb is not None else Lookback([], {}))
        for call, scope in zip(calls, scopes, strict=True):
            self.by_call[str(call.get("id"))] = scope
        return results

    def scopes(self, calls: Sequence[Mapping[str, Any]]) -> list[SearchScope | None]:
        return [self.by_call.get(str(c.get("id"))) for c in calls]


def digest(content: Any) -> str:
    """A short digest of an answer's content: what a round stores instead of the answer."""
    return hashlib.sha256(orjson.dumps(content)).hexdigest()[:32]


def result_key(result: Mapping[str, Any]) -> str:
    """The reclaim key of one of the proxy's answers (the compactor may reclaim it)."""
    return HIDDEN_KEY_PREFIX + str(result.get("tool_call_id"))


def round_entry(
    message: dict[str, Any],
    shown: Any,
    results: list[dict[str, Any]],
    scopes: Sequence[SearchScope | None] = (),
) -> JSON:
    """What the session stores of an only-extract round: the model's message as the upstream
    got it back, what the client saw of it, a digest of each answer, and the scope of each
    search among its calls (`proxy.session.lookback.SearchScope`; None for a read)."""
    entry: JSON = {
        "message": message,
        "shown": shown,
        "digests": [digest(r.get("content")) for r in results],
    }
    if any(s is not None for s in scopes):
        entry["scopes"] = list(scopes)
    return entry


def extract_calls(message: Mapping[str, Any]) -> list[JSON]:
    """The extract calls among a neutral message's tool calls."""
    return split_calls(message.get("tool_calls"))[1]


def rederive(
    calls: Sequence[Mapping[str, Any]],
    digests: Sequence[str],
    book: Lookback,
    scopes: Sequence[SearchScope | None] | None = None,
) -> list[JSON] | None:
    """The answers again from the request (`book`), or None when one no longer matches its
    digest. A search is answered again from the hits it recorded (`scopes`), so what was cut
    or reclaimed since does not change it.

    Each answer found is added to `book.originals` under its key, as the proxy's answers were
    when the model could ask for one of them."""
    results, _ = answers(calls, book, scopes)
    if len(results) != len(digests):
        return None
    if any(digest(r["content"]) != d for r, d in zip(results, digests, strict=True)):
        return None
    for r in results:
        book.originals[result_key(r)] = r["content"]
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
    "Answered",
    "Unmerge",
    "answers",
    "digest",
    "extract_calls",
    "rederive",
    "result_key",
    "round_entry",
    "unmerge_all",
]
