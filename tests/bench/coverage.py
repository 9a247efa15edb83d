"""Future-reference coverage (issue 35): can the model still reach what its next action uses?

Pure: no I/O. The replay (`tests.bench.lookback`) calls it once per turn from a session's
first compaction, with the recorded next action, the client's uncompacted history and what
the proxy sent upstream.

The literals of an action (`action_literals`): every string value of its tool calls'
arguments (a command, a path, a file's new text alike) is cut into tokens, maximal runs of
letters, digits and `_ . / - $` (a backslash splits, as in grep's `a\\|b`); leading `-` and
`$` and trailing `. / -` are trimmed. A token is kept when it has at least 6 characters, is
not only digits (and `. -`), and is not a plain English word, that is when it

- holds a path separator (`/`), a dot between two characters, an underscore or a
  digit, or is camelCase (a lower-case letter right before an upper-case one); or
- is a word the history uses as an identifier: right before `(` (a call or a definition)
  or right after `identifier.` (an attribute), as in `self.render(`.

Only the literals the uncompacted history holds (verbatim) count: the others are new.

Each one is then (`classify`):

- `visible`: in the text the proxy sent upstream;
- `read`: one read away, in the original of a placeholder whose id the upstream request shows;
- `search`: one search away, the proxy's search for it (`proxy.session.lookback.search`, over
  what the request does not show, `unsent_items`) returns a hit whose item holds it verbatim;
- `unreachable`: none of these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.rules import COMPACTED_SYSTEM_PROMPT, PLACEHOLDER_TEMPLATE
from proxy.session.lookback import Item, all_items
from proxy.session.lookback import search as proxy_search

MIN_LENGTH = 6
PLACEHOLDER_MARK = PLACEHOLDER_TEMPLATE.split("{key}")[0]
SUMMARY_MARK = COMPACTED_SYSTEM_PROMPT.split(" into ")[0]  # "Earlier conversation history ..."
CATEGORIES = ("visible", "read", "search", "unreachable")

_TOKEN = re.compile(r"[A-Za-z0-9_.$/-]+")
_LEAD = re.compile(r"^[-$]+")
_TAIL = re.compile(r"[./-]+$")
_NUMBER = re.compile(r"[\d.\-]+")
_MARKED = re.compile(r"[/_\d]|\w\.\w|[a-z][A-Z]")
_CALLED = re.compile(r"([A-Za-z]{6,})\(")
_ATTRIBUTE = re.compile(r"[A-Za-z0-9_]\.([A-Za-z]{6,})\b")


def strings(value: Any) -> list[str]:
    """Every string value in a JSON value, in order."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def argument_strings(message: Mapping[str, Any]) -> list[str]:
    """The string values of a message's tool-call arguments (unparsable JSON as it is)."""
    out: list[str] = []
    for call in message.get("tool_calls") or []:
        raw = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        if not isinstance(raw, str):
            continue
        try:
            out += strings(json.loads(raw))
        except ValueError:
            out.append(raw)
    return out


def content_text(content: Any) -> str:
    """A message's content as text: a string, or its parts' text run together."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def message_texts(message: Mapping[str, Any], *, raw: bool = True) -> list[str]:
    """What a model reads of a chat message: its content, then for each tool call its name,
    the string values of its arguments and (with `raw`) the arguments as sent. Without `raw`
    a call reads the same on every wire (Messages re-serialises the arguments' JSON)."""
    out = [content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        sent = str(fn.get("arguments") or "")
        try:
            values = strings(json.loads(sent))
        except ValueError:
            values = [sent]
        out.append("\n".join([str(fn.get("name") or ""), *values, *([sent] if raw else [])]))
    return out


def shown_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """Everything a list of chat messages shows the model, as one text."""
    return "\n".join(t for m in messages for t in message_texts(m))


def compacted(shown: str) -> bool:
    """Whether a request the proxy sent shows a placeholder or a summary."""
    return PLACEHOLDER_MARK in shown or SUMMARY_MARK in shown


def unsent_items(history: Sequence[Mapping[str, Any]], shown: str) -> list[Item]:
    """What a search covers, as the proxy's items (`proxy.session.lookback.all_items`, oldest
    first): those of every client message the upstream request does not show verbatim (a
    piece of it, its content or a tool call, is not in `shown`): what a summary cut, and
    reclaimed results."""
    unsent = {
        i
        for i, m in enumerate(history)
        if any(t and t not in shown for t in message_texts(m, raw=False))
    }
    return [item for item in all_items(history) if item.index in unsent]


def search(items: Sequence[Item], query: str) -> list[Item]:
    """The items the proxy's search (`proxy.session.lookback.search`: literal, in any case,
    newest first, at most 20 hits) returns for `query`."""
    by_id = {item.id: item for item in items}
    return [by_id[i] for i in proxy_search(query, items).scope["hits"]]


def tokens(text: str) -> list[str]:
    """Candidate literals of a text: runs of path and identifier characters, edges trimmed."""
    out = []
    for raw in _TOKEN.findall(text):
        token = _TAIL.sub("", _LEAD.sub("", raw))
        if len(token) >= MIN_LENGTH and not _NUMBER.fullmatch(token):
            out.append(token)
    return out


def marked(token: str) -> bool:
    """True when a token is no plain word: a separator, dot, underscore, digit or camelCase."""
    return _MARKED.search(token) is not None


def identifier_words(text: str) -> set[str]:
    """Plain words a text uses as identifiers: `word(` or `name.word`."""
    return set(_CALLED.findall(text)) | set(_ATTRIBUTE.findall(text))


def action_literals(action: Mapping[str, Any], history: str, identifiers: set[str]) -> set[str]:
    """The literals of an action's tool-call arguments that `history` holds verbatim;
    `identifiers` is `identifier_words` of that history."""
    found: set[str] = set()
    for value in argument_strings(action):
        for token in tokens(value):
            if token in found or not (marked(token) or token in identifiers):
                continue
            if token in history:
                found.add(token)
    return found


Search = Callable[[str], Sequence[Item]]


def classify(literal: str, shown: str, originals: Iterable[str], find: Search) -> str:
    """One literal's category (`CATEGORIES`). `shown` is the upstream request's text,
    `originals` the originals of the placeholders it shows, `find` a search."""
    if literal in shown:
        return "visible"
    if any(literal in text for text in originals):
        return "read"
    if any(literal in hit.text for hit in find(literal)):
        return "search"
    return "unreachable"


@dataclass
class Tally:
    """Counts per category, with a few unreachable examples."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    examples: list[str] = field(default_factory=list)

    def add(self, category: str, literal: str = "") -> None:
        self.counts[category] += 1
        if category == "unreachable" and literal and len(self.examples) < 5:
            if literal not in self.examples:
                self.examples.append(literal)

    def merge(self, other: Tally) -> None:
        for name, n in other.counts.items():
            self.counts[name] += n
        for literal in other.examples:
            if len(self.examples) < 5 and literal not in self.examples:
                self.examples.append(literal)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def shares(self) -> dict[str, float | None]:
        """Percent visible, read, search, unreachable, and the cumulative targets' shares."""
        total = self.total
        if not total:
            return dict.fromkeys((*CATEGORIES, "visible_or_read", "reachable"), None)
        pct = {name: round(100 * n / total, 2) for name, n in self.counts.items()}
        c = self.counts
        pct["visible_or_read"] = round(100 * (c["visible"] + c["read"]) / total, 2)
        pct["reachable"] = round(100 * (total - c["unreachable"]) / total, 2)
        return pct

    def as_dict(self) -> dict[str, Any]:
        return {"literals": self.total, **self.counts, "pct": self.shares(), "ex": self.examples}
