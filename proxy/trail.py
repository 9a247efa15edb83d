"""The artifact trail: what the compacted part of a session touched, kept verbatim.

A summary paraphrases; paths, commands, exit statuses, error lines and the user's rules are
what it loses. The trail keeps them (read by `proxy.artifacts` from the messages a summary
drops), merges them at each compaction instead of summarising them again, and renders them
with the summary as a `## artifact_trail` section within a token budget (default: the smaller
of 2,400 tokens and 7.5% of the threshold; chars/4), least recent entries left out first. A
file the agent only read is one path on its line, and a file the summary already names
verbatim is not listed again, so long sessions over many files (OpenHands' hundreds of
`view`s) keep most of their paths in that room. The code names the agent's own calls used
(`proxy.artifacts.call_names`: dotted, snake_case, camelCase names, as in a script it wrote)
share one line in a sixth of the budget, newest first: what its next actions tend to use.

Stored form (JSON, in the session state): `{"version": 1, "budget": tokens, "entries": [...]}`,
entries oldest first, one per file path / command / error line / rule. Merging a span moves
what it touched to the newest end in the span's own order, uniting a path's operations, so
merging the same span again changes nothing. Pure code: no I/O.

A trail is never changed in place (`update` makes a new one), and a compacted session's
every request renders it (three times: the body, the prompt the compactor reads, the
estimate), at up to 1.4 ms for 1,000 entries. So `render` remembers its last few results by
the trail object itself, held while remembered: a request whose state holds the same object
(the one the last save wrote, `proxy.turn.persist`) renders it once, if at all.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from proxy.artifacts import Entry, entries_of

__all__ = [
    "DEFAULT_BUDGET_TOKENS",
    "MAX_ENTRIES",
    "TRAIL_HEADING",
    "counts",
    "default_budget",
    "entries_of",
    "render",
    "update",
]

TRAIL_HEADING = "## artifact_trail"
TRAIL_VERSION = 1
# 2,000 and 1/16 (1,500 and 5% before): at a 32k threshold a trail of 130 files showed 69 of
# them, now 101 (BENCHMARKS.md section 6, the worst case); only a trail that fills it pays.
# 2,400 and 7.5% since code names are kept too: their sixth of it, the rest as before.
DEFAULT_BUDGET_TOKENS = 2400
BUDGET_SHARE = 0.075  # of the compaction threshold
MAX_ENTRIES = 1000  # kept in the state; the rendering shows what fits the budget
FIRST_SHARE = 0.8  # of the trail's room, for files and user rules when commands compete
NAME_SHARE = 1 / 6  # of the trail's budget, for code names: a room of their own
MAX_NAMES = 300  # name entries kept in the state, the least recent dropped first
KINDS = ("file", "command", "error", "constraint", "name")
OPS = ("read", "write", "edit", "delete", "unknown")


def default_budget(threshold: int | None, share: float | None = None) -> int:
    """The trail's token budget: min(2,400, 7.5% (or `share`) of the compaction threshold)."""
    if threshold is None or threshold <= 0:
        return DEFAULT_BUDGET_TOKENS
    share = BUDGET_SHARE if share is None else share
    return max(0, min(DEFAULT_BUDGET_TOKENS, int(threshold * share)))


# -- merging --------------------------------------------------------------------------------


def _key(entry: Mapping[str, Any]) -> tuple[str, str]:
    kind = str(entry.get("kind"))
    return kind, str(entry.get("path") if kind == "file" else entry.get("text"))


def _merge_entry(old: Entry | None, new: Entry) -> Entry:
    if old is None:
        return dict(new)
    merged = {**old, **{k: v for k, v in new.items() if k != "ops"}}
    if new.get("kind") == "file":
        ops = set(old.get("ops") or []) | set(new.get("ops") or [])
        if len(ops) > 1:
            ops.discard("unknown")
        merged["ops"] = [op for op in OPS if op in ops]
    return merged


def _stored(trail: Mapping[str, Any] | None) -> list[Entry]:
    entries = (trail or {}).get("entries")
    if not isinstance(entries, list):
        return []
    return [dict(e) for e in entries if isinstance(e, Mapping) and e.get("kind") in KINDS]


def update(
    trail: Mapping[str, Any] | None,
    dropped: Sequence[Mapping[str, Any]],
    *,
    budget: int | None = None,
) -> dict[str, Any]:
    """The trail after a summary dropped `dropped` (neutral messages, oldest first).

    What the span touched moves to the newest end, in the span's order, merged with what the
    trail already held (a path's operations are united); `budget` (tokens) replaces the
    stored one when given. `update(update(t, s), s) == update(t, s)`.
    """
    entries = {_key(e): e for e in _stored(trail)}
    touched: dict[tuple[str, str], Entry] = {}
    for entry in entries_of(dropped):
        key = _key(entry)
        # Re-inserted: an entry's position is its last occurrence in the span.
        previous = touched.pop(key, None) or entries.get(key)
        touched[key] = _merge_entry(previous, entry)
    kept = [e for k, e in entries.items() if k not in touched]
    merged = [*kept, *touched.values()]
    names = sum(1 for e in merged if e.get("kind") == "name")
    if names > MAX_NAMES:  # names come many to a call: they must not push files out
        drop = names - MAX_NAMES
        merged = [e for e in merged if e.get("kind") != "name" or (drop := drop - 1) < 0]
    merged = merged[-MAX_ENTRIES:]
    old_budget = (trail or {}).get("budget")
    if budget is None:
        budget = old_budget if isinstance(old_budget, int) else DEFAULT_BUDGET_TOKENS
    return {"version": TRAIL_VERSION, "budget": budget, "entries": merged}


# -- rendering ------------------------------------------------------------------------------

_SECTIONS = (
    ("file", "### files (read, or named, unless operations follow)"),
    ("command", "### commands (exit status when shown)"),
    ("error", "### errors (first line)"),
    ("constraint", "### user constraints (verbatim)"),
    ("name", "### code names the agent's calls used"),
)
_INTRO = (
    "Kept verbatim by the proxy from the compacted messages, newest first: files the agent "
    "touched, commands it ran, errors it saw, rules the user set."
)


def _line(entry: Mapping[str, Any]) -> str:
    kind = entry.get("kind")
    if kind == "file":
        # Most files were only read: their line is the path alone, so more of them fit.
        ops = entry.get("ops") or []
        changed = any(op not in _PLAIN_OPS for op in ops)
        return f"- {entry.get('path')}" + (f": {', '.join(ops)}" if changed else "")
    if kind == "command":
        status = entry.get("exit")
        return f"- `{entry.get('text')}`" + ("" if status is None else f" -> exit {status}")
    if kind == "constraint":
        return f'- "{entry.get("text")}"'
    if kind == "name":  # names share one line, comma-separated: a name costs its length + 2
        return f"{entry.get('text')}, "
    return f"- {entry.get('text')}"


_PLAIN_OPS = frozenset({"read", "unknown"})
_PATH_CHAR = re.compile(r"[\w./~+@-]")


def _named_in(path: str, text: str) -> bool:
    """Whether `text` names `path` verbatim as a whole path, not inside a longer one (a full
    stop after it ends a sentence, not the path)."""
    start = text.find(path)
    while start >= 0:
        end = start + len(path)
        before = text[start - 1] if start else " "
        after = text[end : end + 1]
        if after == ".":  # a full stop, unless a path goes on after it
            after = text[end + 1 : end + 2]
        if not _PATH_CHAR.match(before) and not (after and _PATH_CHAR.match(after)):
            return True
        start = text.find(path, start + 1)
    return False


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _compose(shown: Iterable[Entry], dropped: int) -> str:
    by_kind: dict[str, list[str]] = {kind: [] for kind, _ in _SECTIONS}
    for entry in shown:
        by_kind[str(entry.get("kind"))].append(_line(entry))
    parts = [TRAIL_HEADING, _INTRO]
    for kind, heading in _SECTIONS:
        if by_kind[kind] and kind == "name":
            parts += [heading, "- " + "".join(by_kind[kind]).removesuffix(", ")]
        elif by_kind[kind]:
            parts.append(heading)
            parts.extend(by_kind[kind])
    if dropped:
        parts.append(f"({dropped} older entries not shown: over the trail's budget)")
    return "\n".join(parts)


def _select(newest: list[Entry], limit: int, name_room: int = 0) -> set[int]:
    """Indices (into `newest`) of the entries that fit in `limit` characters, and of the code
    names that fit in `name_room` more.

    Files and the user's rules come first, newest first, within FIRST_SHARE of the room when
    there are commands or errors to show too (a command's paths are in the files list);
    then commands and errors, newest first; then any room left goes to older files and rules.
    Code names have a room of their own, newest first: they never take a path's place.
    """
    first = [i for i, e in enumerate(newest) if e.get("kind") in ("file", "constraint")]
    second = [i for i, e in enumerate(newest) if e.get("kind") in ("command", "error")]
    names = [i for i, e in enumerate(newest) if e.get("kind") == "name"]
    chosen: set[int] = set()
    used = 0

    def fill(indices: list[int], room: int) -> None:
        nonlocal used
        for i in indices:
            if i in chosen:
                continue
            cost = len(_line(newest[i])) + 1
            if used + cost > room:
                return  # the rest are older: dropped first
            chosen.add(i)
            used += cost

    fill(first, int(limit * FIRST_SHARE) if second else limit)
    fill(second, limit)
    fill(first, limit)
    used = 0
    fill(names, name_room)
    return chosen


_RENDERED: OrderedDict[int, tuple[Mapping[str, Any], int | None, str, str]] = OrderedDict()
_RENDERED_MAX = 32


def render(trail: Mapping[str, Any] | None, budget: int | None = None, shown: str = "") -> str:
    """The section the model reads with the summary; "" for an empty trail.

    Newest first within each kind; past the budget (tokens, chars/4) the least recent
    entries are left out (commands and errors before files and rules) and counted. A file
    that was only read and that `shown` (the summary the trail goes with) already names
    verbatim is not listed again: its room goes to files the summary does not name.
    """
    if not trail:
        return ""
    key = id(trail)
    seen = _RENDERED.get(key)
    if seen is not None and seen[0] is trail and seen[1] == budget and seen[3] == shown:
        _RENDERED.move_to_end(key)
        return seen[2]
    text = _render(trail, budget, shown)
    # The object held: its id is not reused meanwhile.
    _RENDERED[key] = (trail, budget, text, shown)
    while len(_RENDERED) > _RENDERED_MAX:
        _RENDERED.popitem(last=False)
    return text


def _render(trail: Mapping[str, Any], budget: int | None, shown: str = "") -> str:
    entries = _stored(trail)
    if shown:
        entries = [e for e in entries if not _in_summary(e, shown)]
    if not entries:
        return ""
    if budget is None:
        stored = (trail or {}).get("budget")
        budget = stored if isinstance(stored, int) else DEFAULT_BUDGET_TOKENS
    newest = entries[::-1]
    # Headings and the note are fixed costs; every line costs its length plus a newline.
    fixed = len(_compose([], len(entries))) + sum(len(h) + 1 for _, h in _SECTIONS)
    named = any(e.get("kind") == "name" for e in entries)
    name_room = int(budget * NAME_SHARE) * 4 if named else 0
    chosen = _select(newest, budget * 4 - fixed - name_room, name_room)
    if not chosen:
        return ""
    listed = [e for i, e in enumerate(newest) if i in chosen]
    text = _compose(listed, len(entries) - len(listed))
    return text if estimate_tokens(text) <= budget else ""


def _in_summary(entry: Mapping[str, Any], shown: str) -> bool:
    """A file only read (or named) whose path the summary already gives verbatim, or a code
    name it gives."""
    if entry.get("kind") == "name":
        return str(entry.get("text")) in shown
    if entry.get("kind") != "file" or any(op not in _PLAIN_OPS for op in entry.get("ops") or []):
        return False
    path = entry.get("path")
    return isinstance(path, str) and bool(path) and _named_in(path, shown)


def counts(trail: Mapping[str, Any] | None) -> dict[str, int]:
    """Entries per kind, for metrics and the admin detail (code names are not counted)."""
    out = dict.fromkeys(KINDS[:-1], 0)
    for entry in _stored(trail):
        if entry["kind"] in out:
            out[entry["kind"]] += 1
    return out
