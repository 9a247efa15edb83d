"""What one turn's model asked back, counted for the session (`proxy.session.asked_back`).

`TurnLookBack` notes, as the turn goes, the client's tool calls that re-run a reclaimed
result (`started`, on the request's new messages) and the proxy's answers to the hidden
tool (`answered`: reads by the tool read, searches with and without hits). `settle` adds
them to the session's counts when the turn is saved and gives the turn's record its
`lookback` field (with the results level 1 reclaimed in the turn), which `/metrics` reads
from the request's state; the log line gets its totals, without tool names.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from proxy.session import asked_back
from proxy.session.rebuild import Rebuild
from proxy.session.state import SessionState

JSON = dict[str, Any]


# Sessions whose reclaimed calls' signatures are kept (`Signatures`), the least recent dropped.
SIGNATURES_KEPT = 32


class Signatures:
    """The signatures of each recent session's reclaimed calls, kept while its reclaimed
    results stay the same: a turn that compacts nothing reads its new calls alone, instead of
    the whole history and a digest per reclaimed result (several ms at 1,500 of them). The
    idle reclaim empties it (`proxy.cli`), like the other caches kept only for speed.
    An entry holds for the session's reset count and its reclaimed list's length and last key:
    the list only grows while the history goes on, and an edit of the history resets it."""

    def __init__(self, kept: int = SIGNATURES_KEPT) -> None:
        self.kept = kept
        self._entries: OrderedDict[str, tuple[tuple[Any, ...], frozenset[str]]] = OrderedDict()

    def get(self, session: str, rb: Rebuild) -> frozenset[str]:
        state = rb.state
        version = (state.resets, len(state.reclaimed), state.reclaimed[-1])
        entry = self._entries.get(session)
        if entry is not None and entry[0] == version:
            self._entries.move_to_end(session)
            return entry[1]
        found = asked_back.reclaimed_signatures(rb.messages, rb.keys, state.reclaimed, rb.new_from)
        self._entries[session] = (version, found)
        self._entries.move_to_end(session)
        while len(self._entries) > self.kept:
            self._entries.popitem(last=False)
        return found

    def clear(self) -> None:
        self._entries.clear()


SIGNATURES = Signatures()  # the process's


class TurnLookBack:
    """One turn's look-backs, until `settle` counts them for the session."""

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}
        self.reruns: dict[str, int] = {}
        self.hits = self.empty = 0
        self.before: dict[str, int] = {}  # each tool's reclaimed count when the turn began
        self.rb: Rebuild | None = None  # the request as loaded (its messages name the tools)
        self._names: dict[str, str] | None = None

    def started(
        self, rb: Rebuild | None, session: str | None = None, kept: Signatures | None = None
    ) -> None:
        """Note the session's counts, and the new tool calls that re-run a reclaimed result
        (`session`: its id, to keep the signatures of its reclaimed calls between turns in
        `kept`, the process's `SIGNATURES` unless given)."""
        self.rb = rb
        if rb is None:
            return
        state = rb.state
        asked_back.tidy(state)  # as stored: a damaged record loses only what is wrong in it
        self.before = {name: row[asked_back.RECLAIMED] for name, row in state.lookback.items()}
        start = rb.new_from
        if rb.reset_reason is not None or not state.reclaimed:
            return
        fresh = asked_back.fresh_calls(rb.messages, start)
        if not fresh:
            return
        if session is None:
            found = asked_back.reclaimed_signatures(rb.messages, rb.keys, state.reclaimed, start)
        else:
            found = (kept or SIGNATURES).get(session, rb)
        for name in asked_back.rerun_names(fresh, found):
            self.reruns[name] = self.reruns.get(name, 0) + 1

    def answered(self, calls: list[JSON], results: list[JSON]) -> list[JSON]:
        """Count the proxy's answers to hidden calls (searches, and reads by the tool read);
        the answers, as they are."""
        for call, result in zip(calls, results, strict=False):
            kind = asked_back.kind(call)
            if kind == "search":
                if asked_back.found(result.get("content")):
                    self.hits += 1
                else:
                    self.empty += 1
            elif kind == "read":
                name = self._name_of(asked_back.requested(call))
                self.reads[name] = self.reads.get(name, 0) + 1
        return results

    def _name_of(self, key: str | None) -> str:
        if self.rb is None or key is None:
            return asked_back.UNKNOWN
        if self._names is None:
            self._names = asked_back.names_by_key(self.rb.messages, self.rb.keys)
        return self._names.get(key, asked_back.UNKNOWN)

    def settle(self, state: SessionState, request_state: Any) -> JSON:
        """Count the turn's look-backs for the session (once); what its record carries.

        The request's state gets the record too (`lookback`, for `/metrics`), and its log
        line the counts without tool names: logs carry no client content."""
        counts = asked_back.Counts(state.lookback, state.searches)
        reads = {counts.add(n, asked_back.READS, k): k for n, k in self.reads.items()}
        reruns = {counts.add(n, asked_back.RERUNS, k): k for n, k in self.reruns.items()}
        for hit, n in ((True, self.hits), (False, self.empty)):
            for _ in range(n):
                counts.search(hit)
        reclaimed = {
            name: got
            for name, row in state.lookback.items()
            if (got := row[asked_back.RECLAIMED] - self.before.get(name, 0)) > 0
        }
        record: JSON = {}
        for field, value in (("reclaimed", reclaimed), ("reads", reads), ("reruns", reruns)):
            if value:
                record[field] = value
        if self.hits or self.empty:
            record["searches"] = {"hits": self.hits, "empty": self.empty}
        self.reads, self.reruns, self.hits, self.empty = {}, {}, 0, 0
        self.before = {name: row[asked_back.RECLAIMED] for name, row in state.lookback.items()}
        if not record:
            return {}
        request_state.lookback = record
        request_state.log_fields["lookback"] = {
            field: sum(value.values()) for field, value in record.items()
        }
        return {"lookback": record}
