"""Looking back at what a session no longer sends in full: its items, their ids, a literal
search over them, and paged reads.

What the model no longer sees whole is in the client's own request: the originals of
reclaimed tool results, and every message, tool call and tool result a summary cut. Each is
an `Item` with an id the extract tool reads (`proxy.session.extract_tool`):

- a tool result: its reclaim key (`proxy.session.history.reclaim_keys`), the id its
  placeholder shows;
- a tool call: `call:` and its call id (the first call of that id in the history);
- any other message: `msg:` and its index in the client's history.

An id depends only on the messages up to the one it names, so it stays valid for the rest of
the session while the client still sends that message. A read is answered for any id of the
request (not only those in the search's scope): its answer then never depends on the state, and
re-derives to the same bytes on later requests. A search's answer depends on its scope (what
was cut or reclaimed when it ran); `SearchScope` records which items it returned, so a later
request re-derives it from those items alone (`proxy.session.hidden_rounds.rederive`).

Client content is untrusted: a search casefolds each item once and finds with `str.find`,
stops at `MAX_HITS` hits or after `MAX_SCAN_CHARS` characters, and a read returns at most
`PAGE_CHARS` characters of the original. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.content_text import TextForm, text_of
from proxy.session.history import leading_system_count, tool_results
from proxy.session.tool_output import EMPTY_OUTPUT, as_text, is_empty

PAGE_CHARS = 20_000  # of the original, in one read
MAX_HITS = 20
PREVIEW_CHARS = 300  # around a match, at most: the match's line(s) only
ANSWER_CHARS = 1_500  # of a search's hit lines; the hits past it are listed by id
MAX_QUERY_CHARS = 500
MAX_SCAN_CHARS = 4_000_000  # one search reads at most this much of the history, newest first
MSG_PREFIX = "msg:"
CALL_PREFIX = "call:"

# What a search recorded so that a later request answers it again with the same bytes: the
# ids of its hits, newest first, and whether it stopped at the scan cap.
SearchScope = dict[str, Any]


@dataclass(frozen=True)
class Item:
    """One thing the model can look back at: its id, the user turn it belongs to (1 for the
    first user message's turn; 0 before it), who wrote it (a role, or a tool's name), its
    text, and the client message it comes from."""

    id: str
    turn: int
    who: str
    text: str
    index: int


def _joined(part: Any) -> str | None:
    return part if isinstance(part, str) else None


_MESSAGE_TEXT = TextForm(part=_joined, whole=lambda content: str(content))


def message_text(message: Mapping[str, Any]) -> str:
    """A user, assistant or system message's words (its text parts, in order)."""
    return text_of(message.get("content"), _MESSAGE_TEXT)


def _call_text(call: Mapping[str, Any]) -> tuple[str, str]:
    fn = call.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    name = str(fn.get("name") or "tool")
    arguments = fn.get("arguments")
    return name, f"{name}({arguments if isinstance(arguments, str) else ''})"


def all_items(
    messages: Sequence[Mapping[str, Any]], keys: Mapping[int, str] | None = None
) -> list[Item]:
    """Every item of a history, in its order (a message's own words before its tool calls)."""
    keys = tool_results(messages)[0] if keys is None else keys
    items: list[Item] = []
    names: dict[str, str] = {}  # call id -> tool name
    seen: set[str] = set()  # call ids already given an item
    turn = 0
    for i, msg in enumerate(messages):
        role = str(msg.get("role"))
        if role == "user":
            turn += 1
        if role in ("tool", "function"):
            key = keys.get(i)
            if key is not None:
                who = names.get(str(msg.get("tool_call_id")), str(msg.get("name") or "tool"))
                items.append(Item(key, turn, who, as_text(msg.get("content")), i))
            continue
        text = message_text(msg)
        if text:
            items.append(Item(f"{MSG_PREFIX}{i}", turn, role, text, i))
        calls = msg.get("tool_calls") if role == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, Mapping):
                continue
            call_id = str(call.get("id"))
            name, shown = _call_text(call)
            names.setdefault(call_id, name)
            if call_id not in seen:
                seen.add(call_id)
                items.append(Item(f"{CALL_PREFIX}{call_id}", turn, name, shown, i))
    return items


def searchable_items(
    messages: Sequence[Mapping[str, Any]],
    *,
    cut: tuple[int, int] | None,
    reclaimed: Collection[str],
    keys: Mapping[int, str] | None = None,
    kept: int | None = None,
) -> list[Item]:
    """What a search covers, oldest first: every item of the messages a summary cut (those
    in `cut`, a range of client indices, but `kept`, a message it moved after the summary,
    and the client's leading system messages), and every reclaimed tool result (its key in
    `reclaimed`). Hidden extract answers are copies of originals: not searched."""
    lo, hi = cut if cut is not None else (0, 0)
    lo = max(lo, leading_system_count(messages))  # the client's system prompt is always sent
    wanted = set(reclaimed)
    found = []
    for item in all_items(messages, keys):
        i = item.index
        if lo <= i < hi and i != kept:
            found.append(item)
        elif item.id in wanted and messages[i].get("role") in ("tool", "function"):
            found.append(item)
    return found


class Compacted(Protocol):
    """What a session's state says was compacted (`proxy.session.state.SessionState`)."""

    @property
    def summary(self) -> str | None: ...
    @property
    def cut(self) -> int: ...
    @property
    def moved_user(self) -> int | None: ...
    @property
    def reclaimed(self) -> list[str]: ...


class Rebuilt(Protocol):
    """A request rebuilt under its session's state (`proxy.session.rebuild.Rebuild`)."""

    @property
    def messages(self) -> list[dict[str, Any]]: ...
    @property
    def state(self) -> Compacted: ...
    @property
    def system_count(self) -> int: ...
    @property
    def floor(self) -> int: ...
    @property
    def keys(self) -> dict[int, str]: ...
    @property
    def originals(self) -> dict[str, Any]: ...


def searchable(rb: Rebuilt) -> list[Item]:
    """What a search of the extract tool covers in a rebuilt request, oldest first: every
    item (message, tool call, tool result) a summary cut, and every reclaimed tool result,
    each with its id, turn, role or tool name and text (`Item`), as the state stands: called
    after the request's compaction, what its upstream request no longer carries whole."""
    state = rb.state
    cut = (max(rb.system_count, rb.floor), state.cut) if state.summary else None
    return searchable_items(
        rb.messages, cut=cut, reclaimed=state.reclaimed, keys=rb.keys, kept=state.moved_user
    )


# -- search ---------------------------------------------------------------------------------


def _preview(text: str, start: int, length: int) -> str:
    """The line(s) of `text` around [start, start + length), at most `PREVIEW_CHARS` characters
    centred on the match, on one line: a hit in source or a listing shows its own line, not
    its neighbours."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start + length)
    line_end = len(text) if line_end < 0 else line_end
    lead = max(0, (PREVIEW_CHARS - length) // 2)
    begin = max(line_start, start - lead)
    end = min(line_end, begin + max(PREVIEW_CHARS, length))
    begin = max(line_start, min(begin, end - PREVIEW_CHARS))
    shown = " ".join(text[begin:end].split())
    return ("..." if begin else "") + shown + ("..." if end < len(text) else "")


@dataclass
class Found:
    """A search's answer, and the scope that gives it again."""

    text: str
    scope: SearchScope = field(default_factory=dict)


def search(query: str, items: Sequence[Item], *, partial: bool | None = None) -> Found:
    """The items (newest first, at most `MAX_HITS`) whose text holds `query`, in any case.

    Linear in what it reads: the query is casefolded once, each item's text (up to what is
    left of `MAX_SCAN_CHARS`) once, and searched with `str.find`. `partial` given (a search
    answered again from its recorded hits): the answer says what it said then."""
    needle = query.casefold()
    hits: list[tuple[Item, str]] = []
    budget = MAX_SCAN_CHARS
    stopped = False
    for item in reversed(items):
        if budget <= 0:
            stopped = True
            break
        text = item.text[:budget]
        budget -= len(text)
        folded = text.casefold()
        pos = folded.find(needle)
        if pos < 0:
            continue
        exact = len(folded) == len(text)  # casefolding kept the length: the same positions
        hits.append((item, _preview(item.text if exact else folded, pos, len(needle))))
        if len(hits) == MAX_HITS:
            break
    stopped = stopped if partial is None else partial
    scope: SearchScope = {"hits": [item.id for item, _ in hits], "partial": stopped}
    return Found(_render(query, hits, stopped), scope)


def _render(query: str, hits: list[tuple[Item, str]], stopped: bool) -> str:
    """The answer: a line per hit while the lines fit in `ANSWER_CHARS` (the first always),
    then the ids of the rest, so that what rides along in later requests stays small."""
    quoted = query if len(query) <= 80 else query[:80] + "..."
    more = " (stopped early: the history to search was too long)" if stopped else ""
    if not hits:
        return f"No match for {quoted!r} in the compacted history{more}."
    lines = [f"{len(hits)} match(es) for {quoted!r}, newest first{more}. Read one by its ID:"]
    used = 0
    for n, (item, shown) in enumerate(hits):
        line = f"- {item.id} (turn {item.turn}, {item.who}): {shown}"
        if n and used + len(line) > ANSWER_CHARS:
            rest = ", ".join(other.id for other, _ in hits[n:])
            lines.append(f"{len(hits) - n} more, not previewed (refine the query): {rest}")
            break
        lines.append(line)
        used += len(line)
    return "\n".join(lines)


# -- read -----------------------------------------------------------------------------------


def page(content: Any, offset: int = 0) -> Any:
    """An original as one read gives it: whole (a string, or its parts in order) when its text
    is at most `PAGE_CHARS` characters, else the text from `offset` on, at most `PAGE_CHARS`
    characters, with where the next page starts."""
    if is_empty(content):
        return EMPTY_OUTPUT if offset == 0 else _past_end(offset, 0)
    text = content if isinstance(content, str) else as_text(content)
    if offset == 0 and len(text) <= PAGE_CHARS:
        return content
    if offset >= len(text):
        return _past_end(offset, len(text))
    end = min(len(text), offset + PAGE_CHARS)
    if end < len(text):
        note = f"Characters {offset}-{end} of {len(text)}; the next page starts at offset {end}."
    else:
        note = f"Characters {offset}-{end} of {len(text)}: the end."
    return f"{text[offset:end]}\n[{note}]"


def _past_end(offset: int, total: int) -> str:
    return f"[Error] offset {offset} is past the end: the original has {total} characters."


@dataclass
class Lookback:
    """What the extract tool reads and searches in one request: the client's messages, the
    originals of its tool results by key (the proxy's hidden answers added as they are
    re-derived), and, for a new search, what it covers (`scope`: `searchable_items`)."""

    messages: Sequence[Mapping[str, Any]]
    originals: dict[str, Any]
    keys: Mapping[int, str] | None = None
    scope: Callable[[], list[Item]] | None = None
    _by_id: dict[str, Item] | None = field(default=None, init=False, repr=False)
    _scoped: list[Item] | None = field(default=None, init=False, repr=False)

    def fork(self) -> Lookback:
        """The same request, with its own copy of the originals (to add answers to)."""
        return Lookback(self.messages, dict(self.originals), self.keys, self.scope)

    def every(self) -> dict[str, Item]:
        if self._by_id is None:
            self._by_id = {}
            for item in all_items(self.messages, self.keys):
                self._by_id.setdefault(item.id, item)
        return self._by_id

    def read(self, wanted: str, offset: int) -> Any | None:
        """What an id names, paged; None when the request holds nothing of that id."""
        if wanted in self.originals:
            return page(self.originals[wanted], offset)
        if wanted.startswith(MSG_PREFIX) and wanted[len(MSG_PREFIX) :].isdigit():
            i = int(wanted[len(MSG_PREFIX) :])
            if i < len(self.messages):
                return page(_whole_message(self.messages[i]), offset)
            return None
        item = self.every().get(wanted) if wanted.startswith(CALL_PREFIX) else None
        return None if item is None else page(item.text, offset)

    def search(self, query: str, scope: SearchScope | None = None) -> Found:
        """A new search over `scope()`; or, with a recorded `scope`, the same search answered
        again from the items it returned."""
        if scope is None:
            if self._scoped is None:
                self._scoped = self.scope() if self.scope is not None else []
            return search(query, self._scoped)
        by_id = self.every()
        ids = scope.get("hits")
        wanted = [by_id[i] for i in ids if isinstance(i, str) and i in by_id] if ids else []
        wanted.sort(key=_order(by_id))
        return search(query, wanted, partial=bool(scope.get("partial")))


def _order(by_id: Mapping[str, Item]) -> Callable[[Item], int]:
    positions = {item_id: n for n, item_id in enumerate(by_id)}
    return lambda item: positions[item.id]


def _whole_message(message: Mapping[str, Any]) -> str:
    """A message read back: its role, its words and its tool calls."""
    lines = [f"[{message.get('role')}]", message_text(message)]
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, Mapping):
            lines.append(f"[tool call {call.get('id')}] {_call_text(call)[1]}")
    return "\n".join(line for line in lines if line)


def lookback_of(rb: Rebuilt) -> Lookback:
    """What the extract tool reads and searches in a rebuilt request (a search: `searchable`)."""
    return Lookback(rb.messages, rb.originals, rb.keys, lambda: searchable(rb))
