"""The state the proxy keeps per session, and its stored form.

What a session's compaction decided (reclaimed ids, the summary and the cut it replaces,
hidden extract calls, the last usage), the last turns' records and a compressed copy of the
client's last messages for operators. `proxy.session.rebuild` re-applies it to each request.
Pure code: no I/O.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from proxy.session.extract_tool import split_calls
from proxy.session.fingerprint import PrefixChain
from proxy.session.hidden_rounds import (
    Unmerge,
    digest,
    extract_calls,
    rederive,
    result_key,
    unmerge_all,
)
from proxy.session.history import token_count, tool_results
from proxy.session.lookback import Lookback
from proxy.session.savings_record import clean as clean_savings
from proxy.session.turn_log import TurnLog

# 2: prefix hashes are a running chain, with a hash of the raw messages; 3: the turn records
# are one string (`turn_log`, see proxy.session.turn_log) instead of a list (`turns`)
STATE_VERSION = 3
CHAIN_SCHEME = 2
MAX_VIEW_BYTES = 3 * 2**20  # base64 of the compressed chunks; a longer history is not kept
MAX_VIEW_CHUNKS = 64  # then the view is recompressed whole, once


UNSEALED = ""  # HiddenExtract.before of calls hidden by the turn in progress (see seal_hidden)


@dataclass
class HiddenExtract:
    """The proxy's hidden extract rounds of one turn, by the assistant message they join.

    `calls`: extract calls the model mixed with the client's own (`visible_ids`) in that
    message; the client never saw them: they are re-inserted into it (their answers before
    the client's results). `rounds`: the turn's only-extract rounds (`proxy.session.hidden_rounds`),
    which go back before it. Answers are not stored, only their digests (`digests`, one per
    call; `results` holds copies only in states saved before): a rebuild re-derives them
    from the client's messages (`proxy.session.hidden_rounds.rederive`), so an answer only ever
    holds what the request itself carries. All of it goes back on later rebuilds, but only
    into the history it was recorded in: `before` is the prefix-chain hash
    (`proxy.session.fingerprint.PrefixChain`) of the client messages before the anchor, set when the
    turn that hid them is saved (until then it is `UNSEALED`); `fingerprint` the hash up to
    and including the anchor message, pinned on the first rebuild whose messages match
    `before` and carry the anchor with the same visible calls (and the rounds' visible part
    first). An entry with neither (saved before they existed) is dropped; a call id reused
    in another history matches neither.
    """

    anchor: int
    visible_ids: list[str]
    calls: list[dict[str, Any]]
    results: list[dict[str, Any]]
    before: str | None = None
    fingerprint: str | None = None
    digests: list[str] | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    # Per call, the scope of a search (`proxy.session.lookback.SearchScope`), None for a read;
    # None when no call searched.
    scopes: list[Any] | None = None


def _hidden(data: Mapping[str, Any]) -> HiddenExtract:
    known = {k: v for k, v in data.items() if k in HiddenExtract.__dataclass_fields__}
    return HiddenExtract(**known)


@dataclass
class SessionState:
    prefix_len: int = 0
    prefix_hash: str | None = None
    prefix_raw: str | None = None  # the same prefix's messages as received (raw_digests)
    prefix_chars: int = 0
    summary: str | None = None
    # The artifact trail kept with the summary (proxy.trail); None in states saved before it.
    trail: dict[str, Any] | None = None
    cut: int = 0
    cut_hash: str | None = None
    moved_user: int | None = None
    reclaimed: list[str] = field(default_factory=list)
    total_tokens: int | None = None
    summary_rounds: int = 0
    toolcall_rounds: int = 0
    toolcall_reclaimed: int = 0
    hidden: list[HiddenExtract] = field(default_factory=list)
    turn_log: TurnLog = field(default_factory=TurnLog)
    last_compaction: dict[str, Any] | None = None
    resets: int = 0
    context_window: int | None = None  # learned from the upstream's context-length errors
    # What the upstream bills for a prompt per token of the proxy's own estimate of it
    # (a running average); None until a turn reported its prompt tokens.
    calibration: float | None = None
    # An operator asked for a summary the proxy had no key to make: the next turn makes it
    # with its client's credentials (POST /admin/sessions/{id}/compact answered 202),
    # keeping this many recent messages.
    pending_summary: int | None = None
    # The cost-aware compactor's memory: savings forgone while waiting, and the last summary.
    accrued: float = 0.0
    size_after_summary: int | None = None
    removed_by_summary: int = 0
    # The client's last messages, compressed in chunks, so operators can see what the
    # upstream saw; view_len is how many messages they hold.
    view: list[str] | str | None = None
    view_len: int = 0
    chain: int = CHAIN_SCHEME  # how prefix_hash and cut_hash were computed
    # The API the session speaks ("chat", "responses", "messages"); None when saved before
    # the proxy noted it (those were all Chat Completions sessions).
    wire: str | None = None
    # Messages: the prefix each thinking block was written under (block key -> prefix
    # digest, `proxy.wire.messages.binding`), so no block goes back under another one.
    thinking: dict[str, str] = field(default_factory=dict)
    # The last message carrying a provider's compaction in the history last seen (-1: none;
    # None: not known), so a request resent with more messages looks only at those.
    provider_mark: int | None = None
    # What the turns saved, by hour and model (`proxy.session.savings_record`), and the direct
    # estimate of the last turn's prompt (the prefix a direct request would have cached).
    savings: dict[str, list[int]] = field(default_factory=dict)
    direct_last: int | None = None
    # A summary written ahead of the turn that needs it (`proxy.session.prepared.Prepared`,
    # as a dict); None when there is none.
    ahead: dict[str, Any] | None = None
    ahead_seconds: float | None = None  # how long the last one used took to write
    lookback: dict[str, list[int]] = field(default_factory=dict)  # proxy.session.asked_back
    searches: list[int] = field(default_factory=list)  # its searches: [with hits, without]

    @property
    def compacted(self) -> bool:
        return bool(self.summary) or bool(self.reclaimed)

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The last turns' records, decoded (a copy: add one with `turn_log.append`)."""
        return self.turn_log.records()

    def to_dict(self) -> dict[str, Any]:
        """The stored form (the turn records as their text)."""
        # Shallow on purpose (asdict deep-copies): this runs on every turn.
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["hidden"] = [asdict(h) for h in self.hidden]
        data["turn_log"] = self.turn_log.text
        return {"state_version": STATE_VERSION, **data}

    def to_bytes(self) -> bytes:
        """The stored form: `to_dict` as JSON, laid out so that consecutive saves of a session
        begin alike. The view and the turn log, its bulk and both only ever appended to between
        trims, come first, and the small fields that change every turn after them: a store
        that overwrites a state in place then rewrites the pages of what a turn added, not
        the whole state (`proxy.store.sqlite_rows.padded`). The turn log's JSON is kept from turn
        to turn (`TurnLog.json`), not escaped whole again."""
        small = self.to_dict()
        view = orjson.dumps(small.pop("view"))
        del small["turn_log"]
        rest = orjson.dumps(small)  # "{...}": never empty, state_version is in it
        return b"".join((b'{"view":', view, b',"turn_log":', self.turn_log.json(), b",", rest[1:]))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionState:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if int(data.get("state_version") or 1) < 2:
            known["chain"] = 1  # saved before the running chain: see PrefixChain.legacy_prefix
        hidden = [_hidden(h) for h in known.pop("hidden", None) or []]
        if token_count(known.get("total_tokens")) is None:
            known["total_tokens"] = None  # a bad usage value stored before it was checked
        if "savings" in known:
            known["savings"] = clean_savings(known["savings"])
        text = known.pop("turn_log", None)
        turns = data.get("turns")  # before version 3: a list of records
        log = TurnLog(text) if isinstance(text, str) else TurnLog.of(turns or [])
        return cls(**known, hidden=hidden, turn_log=log)

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        return cls.from_dict(orjson.loads(data))

    def set_view(self, messages: list[dict[str, Any]], *, valid: int = 0) -> None:
        """Keep the client's messages for inspection, compressed in chunks.

        `valid`: how many leading messages of the current view the client still sent
        unchanged; then only the messages after them are compressed and appended, so a turn
        costs what it added, not the whole history.
        """
        chunks = list(self.view) if isinstance(self.view, list) else []
        if not (chunks and valid and valid == self.view_len) or len(chunks) >= MAX_VIEW_CHUNKS:
            chunks, start = [], 0
        else:
            start = self.view_len
        if messages[start:] or not chunks:
            packed = zlib.compress(orjson.dumps(messages[start:]), 1)
            chunks.append(base64.b64encode(packed).decode())
        if sum(len(c) for c in chunks) > MAX_VIEW_BYTES:
            self.view, self.view_len = None, 0
            return
        self.view, self.view_len = chunks, len(messages)

    def view_messages(self) -> list[dict[str, Any]] | None:
        """The messages of the last recorded turn, or None when they were not kept."""
        if not self.view:
            return None
        chunks = [self.view] if isinstance(self.view, str) else self.view
        messages: list[dict[str, Any]] = []
        for chunk in chunks:
            messages.extend(orjson.loads(zlib.decompress(base64.b64decode(chunk))))
        return messages

    def meta(self, message_count: int) -> dict[str, Any]:
        """The small summary a store keeps beside the state, for listing sessions."""
        return {
            "messages": message_count,
            "total_tokens": self.total_tokens,
            "summary_rounds": self.summary_rounds,
            "toolcall_rounds": self.toolcall_rounds,
            "reclaimed": len(self.reclaimed),
            "has_summary": bool(self.summary),
            "wire": self.wire,
        }


def add_hidden(
    state: SessionState,
    anchor: int,
    own_calls: list[dict[str, Any]],
    extract_calls: list[dict[str, Any]],
    results: list[dict[str, Any]],
    scopes: Sequence[Any] = (),
) -> None:
    """Remember extract calls hidden from an assistant message the client will echo back
    (their answers by digest, with each search's scope: a rebuild re-derives them)."""
    entry = _entry(state, anchor)
    entry.visible_ids = [str(c.get("id")) for c in own_calls]
    entry.calls = extract_calls
    entry.digests = [digest(r.get("content")) for r in results]
    entry.scopes = list(scopes) if any(s is not None for s in scopes) else None


def add_round(state: SessionState, anchor: int, entry: dict[str, Any]) -> None:
    """Remember an only-extract round of the turn in progress, which goes back before the
    assistant message at `anchor` (`proxy.session.hidden_rounds.round_entry`)."""
    _entry(state, anchor).rounds.append(entry)


def _entry(state: SessionState, anchor: int) -> HiddenExtract:
    """The turn in progress's entry at `anchor`; an older one there is replaced."""
    for h in state.hidden:
        if h.anchor == anchor and h.before == UNSEALED and h.fingerprint is None:
            return h
    state.hidden = [h for h in state.hidden if h.anchor != anchor]
    h = HiddenExtract(anchor, [], [], [], before=UNSEALED, digests=[])
    state.hidden.append(h)  # sealed when the turn is saved (seal_hidden)
    return h


def seal_hidden(state: SessionState, chain: PrefixChain) -> None:
    """Record, for hidden calls added this turn, the history before their anchor.

    Only calls `add_hidden` marked `UNSEALED` are sealed: an entry without a record (saved
    by an older version, or merged in from another writer) must not be vouched for by this
    request's history.
    """
    for h in state.hidden:
        if h.before == UNSEALED and h.fingerprint is None:
            h.before = chain.prefix(h.anchor) if 0 <= h.anchor <= len(chain) else None


__all__ = [
    "CHAIN_SCHEME",
    "MAX_VIEW_BYTES",
    "MAX_VIEW_CHUNKS",
    "STATE_VERSION",
    "UNSEALED",
    "HiddenExtract",
    "SessionState",
    "add_hidden",
    "add_round",
    "hidden_in",
    "resolve_hidden",
    "seal_hidden",
]


def hidden_by_anchor(
    messages: Sequence[Mapping[str, Any]],
    chain: PrefixChain,
    hidden: list[HiddenExtract],
    start: int,
    unmerge: Unmerge | None = None,
) -> tuple[dict[int, HiddenExtract], dict[int, list[dict[str, Any]]]]:
    """The hidden extract rounds that belong in these messages, by the message they join,
    and what is left of each such message once the client's view of the rounds before it
    is split off (`proxy.session.hidden_rounds.unmerge_all`; the wire's `unmerge`).

    An entry goes back only into the history it was recorded in (see `HiddenExtract`): its
    anchor must be an assistant message that starts with what the client saw of its rounds
    and carries the same visible calls, and the messages up to it must hash as recorded.
    Entries without a fingerprint are pinned here, once.
    """
    found: dict[int, HiddenExtract] = {}
    left: dict[int, list[dict[str, Any]]] = {}
    for h in hidden:
        if h.anchor < start or h.anchor >= len(messages):
            continue
        msg = messages[h.anchor]
        if msg.get("role") != "assistant":
            continue
        rest = unmerge_all(dict(msg), h.rounds, unmerge) if h.rounds else [dict(msg)]
        if rest is None:
            continue
        if h.calls:
            own, _ = split_calls(rest[0].get("tool_calls")) if rest else ([], [])
            if not rest or [c.get("id") for c in own] != h.visible_ids:
                continue
        if h.fingerprint is not None:
            if chain.prefix(h.anchor + 1) == h.fingerprint:
                found[h.anchor] = h
        elif h.before and chain.prefix(h.anchor) == h.before:
            found[h.anchor] = replace(h, fingerprint=chain.prefix(h.anchor + 1))
        else:
            continue
        left[h.anchor] = rest
    return found, left


# The proxy's hidden rounds re-applied at one client message, what goes in its place: the
# model's rounds and the proxy's answers, what is left of the message (with the extract
# calls mixed into it), and their answers.
Resolved = list[dict[str, Any]]


def resolve_hidden(h: HiddenExtract, rest: list[dict[str, Any]], book: Lookback) -> Resolved | None:
    """What an entry puts back, its answers re-derived from the client's request (`book`,
    whose originals get them under their keys); None when one no longer gives the recorded
    answer."""
    found = book.fork()
    before: list[dict[str, Any]] = []
    for rnd in h.rounds:
        message = rnd.get("message")
        if not isinstance(message, dict):
            return None
        scopes = rnd.get("scopes")
        got = rederive(
            extract_calls(message),
            rnd.get("digests") or [],
            found,
            scopes if isinstance(scopes, list) else None,
        )
        if got is None:
            return None
        before += [message, *got]
    if h.digests is None:  # saved before answers were references: the copies it kept
        answers = [dict(r) for r in h.results]
        found.originals.update((result_key(r), r.get("content")) for r in answers)
    else:
        again = rederive(h.calls, h.digests, found, h.scopes)
        if again is None:
            return None
        answers = again
    book.originals.update(found.originals)
    if h.calls and rest:
        rest = [{**rest[0], "tool_calls": [*(rest[0].get("tool_calls") or []), *h.calls]}]
    return [*before, *rest, *answers]


def hidden_in(
    messages: list[dict[str, Any]],
    chain: PrefixChain,
    state: SessionState,
    start: int,
    unmerge: Unmerge | None,
) -> tuple[dict[int, HiddenExtract], dict[int, Resolved], Any]:
    """The state's hidden rounds that apply to these messages (the others are forgotten),
    what each puts back, and the messages' `tool_results` with the proxy's answers added
    (None when nothing applies: a rebuild reads them only if it needs them)."""
    hidden, left = hidden_by_anchor(messages, chain, state.hidden, start, unmerge)
    resolved: dict[int, Resolved] = {}
    results = None
    if hidden:
        results = tool_results(messages)
        book = Lookback(messages, results[1], results[0])
        for anchor in sorted(hidden):
            got = resolve_hidden(hidden[anchor], left[anchor], book)
            if got is None:  # an answer that cannot be given again: the round goes
                del hidden[anchor]
            else:
                resolved[anchor] = got
    state.hidden = list(hidden.values())
    return hidden, resolved, results
