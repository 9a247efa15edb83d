"""The artifact trail: files, commands, errors and user constraints a summary would paraphrase.

Kept deterministically from the neutral (Chat Completions-shaped) messages a summary drops,
merged at each compaction instead of being summarised again, and rendered with the summary
as a compact `## artifact_trail` section under a token budget.

- files: every path named in tool-call arguments (path-like keys, path-looking string
  values, the paths a shell command names), byte-identical to the argument text; the
  operation is guessed from the tool name, a sub-command argument or the command's verb;
- commands: shell commands run, with the exit status their result shows;
- errors: the first error line of tool results that look like failures;
- constraints: the user's explicit rules ("do not ...", "always ...", "never ...", "must ..."),
  quoted verbatim.

The stored trail is a JSON object: `{"version": 1, "budget": tokens, "entries": [...]}`,
entries oldest first. Merging moves what a span touched to the newest end in the span's own
order, so merging the same span again changes nothing. Pure code: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

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
DEFAULT_BUDGET_TOKENS = 1500
BUDGET_SHARE = 0.05  # of the compaction threshold
MAX_ENTRIES = 1000  # kept in the state; the rendering shows what fits the budget
MAX_TEXT = 200  # characters of one error or constraint line
MAX_COMMAND = 120
FIRST_SHARE = 0.7  # of the trail's room, for files and user rules when commands compete
MAX_PATH = 300
KINDS = ("file", "command", "error", "constraint")
OPS = ("read", "write", "edit", "delete", "unknown")

Entry = dict[str, Any]

_PATH_KEYS = frozenset(
    {"path", "paths", "file", "files", "filename", "filenames", "filepath", "file_path"}
    | {"target", "target_file", "source", "src", "dest", "destination", "dir", "directory"}
    | {"notebook_path", "old_path", "new_path", "relative_path", "absolute_path"}
)
_COMMAND_KEYS = frozenset({"command", "cmd"})
_SUBCOMMAND_KEYS = ("command", "action", "operation", "mode")
_SUBCOMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit", "write", "edit"})
_EXTENSIONS = (
    "py|pyi|js|jsx|ts|tsx|mjs|cjs|rs|go|c|h|cc|cpp|hpp|java|kt|rb|php|cs|swift|scala|ex|exs"
    "|erl|hs|ml|lua|pl|sh|bash|zsh|sql|md|rst|txt|json|jsonl|toml|ya?ml|cfg|ini|lock"
    "|xml|html|css|scss|csv|tsv|log|ipynb|pony|proto|gradle|mk|cmake|patch|diff"
)
_EXTENSION = re.compile(rf"[\w.-]*\w\.(?:{_EXTENSIONS})", re.IGNORECASE)
_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"`<>()\[\]{},;|]+", re.IGNORECASE)
_TOKEN = re.compile(r"[\w.~/+@-]+")
_SED_EXPRESSION = re.compile(r"s/[^/]*/[^/]*/[gip0-9]*")
_SEGMENT_SPLIT = re.compile(r"&&|\|\||[;|\n]")
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
_PATTERN_VERBS = frozenset({"sed", "awk", "grep", "egrep", "rg", "ag", "perl"})
_REDIRECT = re.compile(r"(?<![\d&])>>?\s*([\w.~/+@-]+)")
_ENV_ASSIGNMENT = re.compile(r"\w+=\S*")

_VERB_OPS = {
    "read": {"cat", "head", "tail", "less", "more", "grep", "rg", "ag", "ls", "find", "wc"}
    | {"diff", "stat", "file", "view", "nl", "awk", "tree", "open", "git", "python", "python3"}
    | {"pytest", "node", "go", "cargo", "make", "npm", "pip", "mix", "bat", "sort", "uniq"},
    "write": {"touch", "mkdir", "tee", "cp", "mv", "install", "create", "write"},
    "edit": {"patch", "ed", "str_replace", "insert", "undo_edit", "apply_patch", "edit"},
    "delete": {"rm", "rmdir", "unlink", "shred", "delete", "remove"},
}
_NAME_OPS = (
    ("delete", re.compile(r"delete|remove|unlink|(?:^|_)rm(?:$|_)", re.IGNORECASE)),
    ("edit", re.compile(r"edit|replace|patch|insert|update|modify", re.IGNORECASE)),
    ("write", re.compile(r"write|create|save|new_file|put|touch|mkdir", re.IGNORECASE)),
    ("read", re.compile(r"read|view|open|cat|get|show|search|grep|glob|find|list|ls", re.I)),
)

_EXIT_STATUS = (
    re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>"),
    re.compile(r"\bexit(?:ed)?\s+(?:code|status)\s*[:=]?\s*(-?\d+)", re.IGNORECASE),
    re.compile(r"\bprocess exited with code\s*(-?\d+)", re.IGNORECASE),
    re.compile(r"\breturn(?:ed)?\s+code\s*[:=]?\s*(-?\d+)", re.IGNORECASE),
)
_ERROR_LINE = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b(?::|$)|\berror(?:\[\w+\])?:|\bError\b:|\bFAILED\b|\bFATAL\b"
    r"|\bERROR\b|No such file or directory|command not found|Permission denied|\bpanic(?:ked)?\b:",
)
_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"[\w.]*(?:Error|Exception|Exit|Interrupt)\b")
_WRAPPER = re.compile(r"\s*</?(?:returncode|output)>(?:-?\d+</returncode>)?\s*$")
_CONSTRAINT = re.compile(r"\b(?:do not|don't|dont|always|never|must)\b", re.IGNORECASE)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


def default_budget(threshold: int | None) -> int:
    """The trail's token budget: min(1,500, 5% of the compaction threshold)."""
    if threshold is None or threshold <= 0:
        return DEFAULT_BUDGET_TOKENS
    return max(0, min(DEFAULT_BUDGET_TOKENS, int(threshold * BUDGET_SHARE)))


# -- reading a span -------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _one_line(text: str, limit: int = MAX_TEXT) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _plausible_path(value: str) -> bool:
    return (
        0 < len(value) <= MAX_PATH
        and not any(c.isspace() for c in value)
        and any(c.isalnum() for c in value)
        and not _SED_EXPRESSION.fullmatch(value)
        and not value.startswith("/dev/")
    )


def _looks_like_path(value: str) -> bool:
    """A whole string value that is a path: no spaces, and a slash or a known extension."""
    if not _plausible_path(value) or value.startswith("-"):
        return False
    return "/" in value or _EXTENSION.fullmatch(value) is not None


def command_paths(command: str) -> list[tuple[str, str]]:
    """(path, op) for the paths a shell command names, each a substring of `command`."""
    found: list[tuple[str, str]] = []
    for segment in _SEGMENT_SPLIT.split(command):
        words = [w for w in segment.split() if not _ENV_ASSIGNMENT.fullmatch(w)]
        while words and words[0] in ("sudo", "env", "time", "nohup", "exec", "cd"):
            words = words[2:] if words[0] == "cd" else words[1:]
        verb = words[0].rsplit("/", 1)[-1] if words else ""
        op = next((o for o, verbs in _VERB_OPS.items() if verb in verbs), "unknown")
        if verb == "sed":
            op = "edit" if any(w.startswith("-i") for w in words) else "read"
        if verb in _PATTERN_VERBS:
            segment = _QUOTED.sub(" ", segment)  # a sed script or a search pattern, not a path
        written = {m.group(1) for m in _REDIRECT.finditer(segment)}
        for url in _URL.finditer(segment):
            found.append((url.group(), op))
        for match in _TOKEN.finditer(_URL.sub(" ", segment)):
            token = match.group().rstrip(".")
            if _looks_like_path(token):
                found.append((token, "write" if token in written else op))
    return found


def _name_op(name: str) -> str:
    for op, pattern in _NAME_OPS:
        if pattern.search(name):
            return op
    return "unknown"


def _walk(value: Any, key: str | None) -> Iterator[tuple[str | None, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk(v, str(k).lower())
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, key)
    else:
        yield key, value


def call_paths(name: str, arguments: Any) -> list[tuple[str, str]]:
    """(path, op) named by one tool call's arguments (a JSON string or an object)."""
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except ValueError:
            args = {"command": arguments} if "\n" not in arguments.strip() else {}
    if not isinstance(args, Mapping):
        return []
    sub = next((args[k] for k in _SUBCOMMAND_KEYS if isinstance(args.get(k), str)), "")
    sub_op = next((o for o, verbs in _VERB_OPS.items() if sub.strip() in verbs), None)
    op = sub_op or _name_op(name)
    found: list[tuple[str, str]] = []
    for key, value in _walk(args, None):
        if key in _COMMAND_KEYS and sub_op is None:
            if isinstance(value, str):
                found.extend(command_paths(value))
            continue
        if not isinstance(value, str):
            continue
        by_key = key is not None and (key in _PATH_KEYS or key.endswith(("_path", "_file")))
        if (by_key and _plausible_path(value)) or _looks_like_path(value):
            found.append((value, op))
    return found


def _commands(arguments: Any) -> list[str]:
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except ValueError:
            return []
    if not isinstance(args, Mapping):
        return []
    out: list[str] = []
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        # A lone editor sub-command ("view", "create") is not a shell command.
        if isinstance(value, str) and value.strip() and value.strip() not in _SUBCOMMANDS:
            out.append(_one_line(value, MAX_COMMAND))
    return out


def exit_status(result: str) -> str | None:
    for pattern in _EXIT_STATUS:
        match = pattern.search(result)
        if match:
            return match.group(1)
    return None


def error_line(result: str) -> str | None:
    """The error line of a result that looks like a failure, else None.

    A failure: a traceback, a non-zero exit status, or a first output line that reads as an
    error. The line: a traceback's exception line, else the first line that reads as one.
    """
    lines = [ln.strip() for ln in result.splitlines() if ln.strip() and not _WRAPPER.match(ln)]
    if any(line.startswith(_TRACEBACK) for line in lines):
        ends = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
        if ends:
            return _one_line(ends[-1])
    status = exit_status(result)
    failed = status is not None and status != "0"
    if not failed and not (lines and _ERROR_LINE.search(lines[0])):
        return None
    for line in lines:
        if not line.startswith(_TRACEBACK) and _ERROR_LINE.search(line):
            return _one_line(line)
    return None


def constraints(text: str) -> list[str]:
    """Sentences of a user message that state an explicit rule, verbatim."""
    out = []
    for sentence in _SENTENCE_SPLIT.split(text):
        sentence = sentence.strip()
        if sentence and len(sentence) <= MAX_TEXT and _CONSTRAINT.search(sentence):
            out.append(sentence)
    return out


def entries_of(messages: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """The trail entries a span of neutral messages produces, in the order they happen."""
    found: list[Entry] = []
    pending: dict[str, list[Entry]] = {}  # call id -> its command entries, awaiting a status
    for message in messages:
        role = message.get("role")
        if role == "user":
            found.extend(
                {"kind": "constraint", "text": c}
                for c in constraints(_text(message.get("content")))
            )
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping):
                    continue
                name, arguments = str(fn.get("name") or ""), fn.get("arguments")
                for path, op in call_paths(name, arguments):
                    found.append({"kind": "file", "path": path, "ops": [op]})
                commands = [{"kind": "command", "text": c} for c in _commands(arguments)]
                found.extend(commands)
                pending[str(call.get("id"))] = commands
        elif role == "tool":
            result = _text(message.get("content"))
            status = exit_status(result)
            for command in pending.pop(str(message.get("tool_call_id")), []):
                if status is not None:
                    command["exit"] = status
            line = error_line(result)
            if line is not None:
                found.append({"kind": "error", "text": line})
    return found


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
    merged = [*kept, *touched.values()][-MAX_ENTRIES:]
    old_budget = (trail or {}).get("budget")
    if budget is None:
        budget = old_budget if isinstance(old_budget, int) else DEFAULT_BUDGET_TOKENS
    return {"version": TRAIL_VERSION, "budget": budget, "entries": merged}


# -- rendering ------------------------------------------------------------------------------

_SECTIONS = (
    ("file", "### files (path: operations)"),
    ("command", "### commands (exit status when shown)"),
    ("error", "### errors (first line)"),
    ("constraint", "### user constraints (verbatim)"),
)
_INTRO = (
    "Kept verbatim by the proxy from the compacted messages, newest first: files the agent "
    "touched, commands it ran, errors it saw, rules the user set."
)


def _line(entry: Mapping[str, Any]) -> str:
    kind = entry.get("kind")
    if kind == "file":
        return f"- {entry.get('path')}: {', '.join(entry.get('ops') or ['unknown'])}"
    if kind == "command":
        status = entry.get("exit")
        return f"- `{entry.get('text')}`" + ("" if status is None else f" -> exit {status}")
    if kind == "constraint":
        return f'- "{entry.get("text")}"'
    return f"- {entry.get('text')}"


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _compose(shown: Iterable[Entry], dropped: int) -> str:
    by_kind: dict[str, list[str]] = {kind: [] for kind, _ in _SECTIONS}
    for entry in shown:
        by_kind[str(entry.get("kind"))].append(_line(entry))
    parts = [TRAIL_HEADING, _INTRO]
    for kind, heading in _SECTIONS:
        if by_kind[kind]:
            parts.append(heading)
            parts.extend(by_kind[kind])
    if dropped:
        parts.append(f"({dropped} older entries not shown: over the trail's budget)")
    return "\n".join(parts)


def _select(newest: list[Entry], limit: int) -> set[int]:
    """Indices (into `newest`) of the entries that fit in `limit` characters.

    Files and the user's rules come first, newest first, within FIRST_SHARE of the room when
    there are commands or errors to show too (a command's paths are in the files list);
    then commands and errors, newest first; then any room left goes to older files and rules.
    """
    first = [i for i, e in enumerate(newest) if e.get("kind") in ("file", "constraint")]
    second = [i for i, e in enumerate(newest) if e.get("kind") in ("command", "error")]
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
    return chosen


def render(trail: Mapping[str, Any] | None, budget: int | None = None) -> str:
    """The section the model reads with the summary; "" for an empty trail.

    Newest first within each kind; past the budget (tokens, chars/4) the least recent
    entries are left out (commands and errors before files and rules) and counted.
    """
    entries = _stored(trail)
    if not entries:
        return ""
    if budget is None:
        stored = (trail or {}).get("budget")
        budget = stored if isinstance(stored, int) else DEFAULT_BUDGET_TOKENS
    newest = entries[::-1]
    # Headings and the note are fixed costs; every line costs its length plus a newline.
    fixed = len(_compose([], len(entries))) + sum(len(h) + 1 for _, h in _SECTIONS)
    chosen = _select(newest, budget * 4 - fixed)
    if not chosen:
        return ""
    shown = [e for i, e in enumerate(newest) if i in chosen]
    text = _compose(shown, len(entries) - len(shown))
    return text if estimate_tokens(text) <= budget else ""


def counts(trail: Mapping[str, Any] | None) -> dict[str, int]:
    """Entries per kind, for metrics and the admin detail."""
    out = dict.fromkeys(KINDS, 0)
    for entry in _stored(trail):
        out[entry["kind"]] += 1
    return out
