"""What a session's model asks back of what compaction took, and what level 1 learns from it.

Per tool name the state keeps three counts (`SessionState.lookback`: name -> [reclaimed,
reads, reruns]) and per session the hidden tool's searches (`SessionState.searches`: [with
hits, without]):

- reclaimed: the tool's results level 1 put behind placeholders;
- reads: extract calls by id (`toolcall_id`), counted for the tool whose result was read
  (`UNKNOWN` when the id names none of the client's results);
- reruns: the client's model called the tool again with the name and (canonical) arguments
  of one of its reclaimed results;
- searches: extract calls with a `query`, with hits or without.

From them, `policy` tells level 1 what to do with a tool's results once at least
`MIN_RECLAIMED` were reclaimed: its retrieval rate (reads + reruns over reclaimed) above
`STOP_ABOVE` stops their reclaiming in that session (`KEEP`); from `DOUBLE_FROM` on, twice as
many of them are kept whole (`DOUBLE`). Tool names are client input: each is bounded and
printable, and a session counts at most `MAX_TOOLS` names (later ones fold into `OTHER`).
Every scan is linear in the messages and bounded per argument. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import orjson

from proxy.session.extract_tool import is_extract_call
from proxy.session.history import HIDDEN_KEY_PREFIX

RECLAIMED, READS, RERUNS = 0, 1, 2
MIN_RECLAIMED = 5
STOP_ABOVE = 0.5
DOUBLE_FROM = 0.2
MAX_TOOLS = 64
MAX_NAME = 64
# Arguments longer than this are compared as sent, not parsed into their canonical form.
MAX_CANONICAL_CHARS = 64 * 1024
UNKNOWN = "(unknown)"  # no API allows parentheses in a tool's name: never a client's tool
OTHER = "(other)"
KEEP: Literal["keep"] = "keep"
DOUBLE: Literal["double"] = "double"
Action = Literal["keep", "double"]
# The answer to a search that found nothing starts so (the hidden tool's own texts).
_NO_HITS = ("[error]", "[no ", "no match", "no hit", "nothing found", "[nothing")


def tool_name(value: Any) -> str:
    """A tool's name as counted: printable, at most `MAX_NAME` characters."""
    if not isinstance(value, str) or not value:
        return UNKNOWN
    clean = "".join(ch if ch.isprintable() else "?" for ch in value[:MAX_NAME])
    return clean


def _function(call: Any) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def _arguments(call: Any) -> Any:
    raw = _function(call).get("arguments")
    if isinstance(raw, str | bytes) and len(raw) <= MAX_CANONICAL_CHARS:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def signature(call: Any) -> str:
    """A tool call's name and canonical arguments (keys sorted, spacing ignored), digested."""
    name = tool_name(_function(call).get("name"))
    args = _arguments(call)
    try:
        text = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # nested too deep, or not JSON at all
        text = str(args).encode()
    return hashlib.sha256(name.encode() + b"\0" + text).hexdigest()[:24]


def kind(call: Any) -> Literal["search", "read"] | None:
    """A hidden extract call as a search (its arguments carry `query`) or a read
    (`toolcall_id`); None for neither."""
    args = _arguments(call)
    if not isinstance(args, dict):
        return None
    if "query" in args:
        return "search"
    if "toolcall_id" in args:
        return "read"
    return None


def requested(call: Any) -> str | None:
    """The id a read asks for."""
    args = _arguments(call)
    value = args.get("toolcall_id") if isinstance(args, dict) else None
    return value if isinstance(value, str) else None


def found(answer: Any) -> bool:
    """Whether a search's answer holds hits: it is not an error or a "no hits" text."""
    text = answer if isinstance(answer, str) else orjson.dumps(answer).decode()
    return bool(text.strip()) and not text.lstrip()[:20].lower().startswith(_NO_HITS)


def call_index(messages: Sequence[Mapping[str, Any]], end: int | None = None) -> dict[str, Any]:
    """Call id -> the assistant's tool call, over the messages before `end`."""
    calls: dict[str, Any] = {}
    for msg in messages[:end]:
        if msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                calls[call["id"]] = call
    return calls


def names_by_key(messages: Sequence[Mapping[str, Any]], keys: Mapping[int, str]) -> dict[str, str]:
    """Reclaim key -> the name of the tool whose result it is (`UNKNOWN` when no call names it)."""
    calls = call_index(messages)
    return {
        key: tool_name(_function(calls.get(str(messages[i].get("tool_call_id")))).get("name"))
        for i, key in keys.items()
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def clean_counts(tools: Any, searches: Any) -> tuple[dict[str, list[int]], list[int]]:
    """Stored counts as they must be (a damaged state loses only what is wrong in them)."""
    rows = tools if isinstance(tools, dict) else {}
    kept = {
        tool_name(name): [_count(v) for v in row[:3]] + [0] * (3 - len(row[:3]))
        for name, row in list(rows.items())[:MAX_TOOLS]
        if isinstance(row, list)
    }
    pair = searches if isinstance(searches, list) else []
    return kept, [_count(v) for v in pair[:2]]


def tidy(state: Any) -> None:
    """Clean a state's stored counts in place (`lookback`, `searches`), as read back."""
    state.lookback, state.searches = clean_counts(state.lookback, state.searches)


class Counts:
    """A session's counts (the state's `lookback` and `searches`), changed in place."""

    def __init__(self, tools: dict[str, list[int]], searches: list[int]) -> None:
        self.tools = tools
        self.searches = searches

    def add(self, name: str, field: int, n: int = 1) -> str:
        """Count `n` for a tool; the name it was counted under."""
        if name not in self.tools and len(self.tools) >= MAX_TOOLS:
            name = OTHER
        row = self.tools.setdefault(name, [0, 0, 0])
        row[field] += n
        return name

    def search(self, hit: bool) -> None:
        while len(self.searches) < 2:
            self.searches.append(0)
        self.searches[0 if hit else 1] += 1


def rate(row: Sequence[int]) -> float | None:
    """A tool's retrieval rate, once enough of its results were reclaimed."""
    if len(row) < 3 or row[RECLAIMED] < MIN_RECLAIMED:
        return None
    return (row[READS] + row[RERUNS]) / row[RECLAIMED]


def action(row: Sequence[int]) -> Action | None:
    found_rate = rate(row)
    if found_rate is None:
        return None
    if found_rate > STOP_ABOVE:
        return KEEP
    return DOUBLE if found_rate >= DOUBLE_FROM else None


def policy(tools: Mapping[str, Sequence[int]]) -> dict[str, Action]:
    """Tool name -> what level 1 does differently with its results (only those it changes)."""
    return {name: act for name, row in tools.items() if (act := action(row)) is not None}


def learned(
    tools: Mapping[str, Sequence[int]],
    messages: Sequence[Mapping[str, Any]],
    keys: Callable[[], Mapping[int, str]],
) -> dict[str, str]:
    """Reclaim key -> what level 1 does differently with that result, from a session's counts
    (`keys`, the messages' reclaim keys, is asked for only when a tool has a policy)."""
    by_tool = policy(tools)
    return dict(key_policy(names_by_key(messages, keys()), by_tool)) if by_tool else {}


def count_reclaimed(counts: Counts, names: Mapping[str, str], keys: Iterable[str]) -> None:
    """Count newly reclaimed results by their tool (the proxy's own answers left out)."""
    for key in keys:
        if not key.startswith(HIDDEN_KEY_PREFIX):
            counts.add(names.get(key, UNKNOWN), RECLAIMED)


def key_policy(names: Mapping[str, str], by_tool: Mapping[str, Action]) -> dict[str, Action]:
    """Reclaim key -> the action for its tool, for the keys whose tool has one."""
    if not by_tool:
        return {}
    return {key: by_tool[name] for key, name in names.items() if name in by_tool}


def reruns(
    messages: Sequence[Mapping[str, Any]],
    keys: Mapping[int, str],
    reclaimed: Iterable[str],
    start: int,
) -> list[str]:
    """The names of the tools the messages from `start` call again with the name and arguments
    of a result reclaimed before (one per such call)."""
    fresh = fresh_calls(messages, start)
    if not fresh:
        return []
    return rerun_names(fresh, reclaimed_signatures(messages, keys, reclaimed, start))


def fresh_calls(messages: Sequence[Mapping[str, Any]], start: int) -> list[dict[str, Any]]:
    """The client's own tool calls in the messages from `start`."""
    return [
        call
        for msg in messages[start:]
        if msg.get("role") == "assistant"
        for call in msg.get("tool_calls") or ()
        if isinstance(call, dict) and not is_extract_call(call)
    ]


def reclaimed_signatures(
    messages: Sequence[Mapping[str, Any]],
    keys: Mapping[int, str],
    reclaimed: Iterable[str],
    start: int,
) -> frozenset[str]:
    """The signatures of the calls whose results, before `start`, were reclaimed. One pass
    over the history and a digest per reclaimed result: `proxy.turn.asked_back_tally` keeps
    them for the session until its reclaimed results change."""
    wanted = set(reclaimed)
    if not wanted:
        return frozenset()
    calls = call_index(messages, start)
    return frozenset(
        signature(call)
        for i, key in keys.items()
        if i < start
        and key in wanted
        and (call := calls.get(str(messages[i].get("tool_call_id")))) is not None
    )


def rerun_names(fresh: Iterable[Any], signatures: frozenset[str]) -> list[str]:
    """The tool names of the calls in `fresh` whose signature is one of `signatures`."""
    if not signatures:
        return []
    return [tool_name(_function(c).get("name")) for c in fresh if signature(c) in signatures]


def table(
    tools: Mapping[str, Sequence[int]], searches: Sequence[int], *, learning: bool
) -> dict[str, Any]:
    """The counts as operators read them, with the policy in effect per tool."""
    rows = []
    for name, row in sorted(tools.items()):
        if len(row) < 3:
            continue
        act = action(row) if learning else None
        found_rate = rate(row)
        rows.append(
            {
                "tool": name,
                "reclaimed": row[RECLAIMED],
                "reads": row[READS],
                "reruns": row[RERUNS],
                "rate": None if found_rate is None else round(found_rate, 3),
                "policy": "off" if not learning else act or "reclaim",
            }
        )
    hits = searches[0] if searches else 0
    empty = searches[1] if len(searches) > 1 else 0
    return {"tools": rows, "searches": {"hits": hits, "empty": empty}, "learning": learning}


__all__ = [
    "DOUBLE",
    "KEEP",
    "MIN_RECLAIMED",
    "OTHER",
    "READS",
    "RECLAIMED",
    "RERUNS",
    "UNKNOWN",
    "Action",
    "Counts",
    "call_index",
    "clean_counts",
    "count_reclaimed",
    "found",
    "key_policy",
    "kind",
    "learned",
    "names_by_key",
    "policy",
    "rate",
    "requested",
    "reruns",
    "signature",
    "table",
    "tidy",
    "tool_name",
]
