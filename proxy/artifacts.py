"""What a span of neutral messages names: paths, commands with exit status, errors, user rules.

Read deterministically from Chat Completions-shaped messages (every wire format's neutral
form) for the artifact trail (`proxy.trail`):

- paths from tool-call ARGUMENTS, never from tool names (which differ between agents): values
  of path-like keys, string values that parse as a path (a slash or a known extension), and
  the paths a shell command (`command` / `cmd`, a string or an argv list) names. A path is
  always a substring of the argument's text, byte for byte. The operation (read / write /
  edit / delete / unknown) is a guess from the tool name, a sub-command or the command verb;
- shell commands, with the exit status their result shows ("Exit code: 1", "exit status 2",
  "<returncode>0</returncode>", ...);
- the first error line of results that look like failures;
- the user's explicit rules ("do not ...", "always ...", "never ...", "must ..."), verbatim.

A long session's compacted span is read again on every request that applies its summary
(the trail is rebuilt from the same messages): what the scans found in a long tool result is
remembered (`_result_facts`), so such a request reads the new results only. Pure code: no
I/O.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.code_names import FILE_EXTENSIONS as _EXTENSIONS
from proxy.code_names import call_names
from proxy.code_names import walk as _walk
from proxy.content_text import TEXT_ONLY, text_of

__all__ = [
    "call_paths",
    "command_paths",
    "constraints",
    "entries_of",
    "error_line",
    "exit_status",
    "forget",
]

MAX_TEXT = 200  # characters of one error or constraint line
MAX_COMMAND = 120
MAX_PATH = 300

Entry = dict[str, Any]

_PATH_KEYS = frozenset(
    {"path", "paths", "file", "files", "filename", "filenames", "filepath", "file_path"}
    | {"target", "target_file", "source", "src", "dest", "destination", "dir", "directory"}
    | {"notebook_path", "old_path", "new_path", "relative_path", "absolute_path"}
)
_COMMAND_KEYS = frozenset({"command", "cmd"})
_CONTENT_KEYS = frozenset(
    {"content", "contents", "old_string", "new_string", "old_str", "new_str", "file_text"}
    | {"insert_text", "new_source", "code", "source_code", "text", "body", "data"}
)
_SUBCOMMAND_KEYS = ("command", "action", "operation", "mode")
_SUBCOMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit", "write", "edit"})
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
    ("delete", {"delete", "remove", "unlink", "rm", "del"}),
    ("edit", {"edit", "replace", "patch", "insert", "update", "modify", "str"}),
    ("write", {"write", "create", "save", "new", "put", "touch", "mkdir", "mkdirs"}),
    (
        "read",
        {"read", "view", "open", "cat", "get", "show", "search", "grep", "glob", "find"}
        | {"list", "ls", "fetch", "look", "inspect"},
    ),
)
_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")

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


def _one_line(text: str, limit: int = MAX_TEXT) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _plausible_path(value: str, *, spaces: bool = False) -> bool:
    """`spaces`: a value under a path key may hold spaces (never a line break)."""
    return (
        0 < len(value) <= MAX_PATH
        and not any(c.isspace() and (c != " " or not spaces) for c in value)
        and any(c.isalnum() for c in value)
        and not _SED_EXPRESSION.fullmatch(value)
    )


def _looks_like_path(value: str) -> bool:
    """A whole string value that is a path: no spaces, and a slash or a known extension."""
    if not _plausible_path(value) or value.startswith("-"):
        return False
    return "/" in value or _EXTENSION.fullmatch(value) is not None


def _clear_path(token: str) -> bool:
    """A path named inside free text: a file name with a known extension, or two or more
    segments (`lib/app`, not `/div` nor an arity like `render/1`)."""
    if not _looks_like_path(token):
        return False
    if _EXTENSION.fullmatch(token.rsplit("/", 1)[-1]):
        return True
    parts = [p for p in token.split("/") if p]
    return (
        len(parts) >= 2
        and all(any(c.isalnum() for c in p) for p in parts)
        and not (parts[-1].isdigit())
    )


def text_paths(text: str) -> list[str]:
    """The paths free text names (a task for a sub-agent, a patch, a description)."""
    found = [url.group() for url in _URL.finditer(text)]
    for match in _TOKEN.finditer(_URL.sub(" ", text)):
        token = match.group().rstrip(".")
        if _clear_path(token):
            found.append(token)
    return found


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
    words = {w.lower() for w in _NAME_WORD.findall(name)}
    return next((op for op, names in _NAME_OPS if words & names), "unknown")


def call_paths(name: str, arguments: Any) -> list[tuple[str, str]]:
    """(path, op) named by one tool call's arguments (a JSON string or an object)."""
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except ValueError:
            one_line = "\n" not in arguments.strip()
            args = {"command" if one_line else "input": arguments}  # a free-form tool's input
    if not isinstance(args, Mapping):
        return []
    sub = next((args[k] for k in _SUBCOMMAND_KEYS if isinstance(args.get(k), str)), "")
    sub_op = next((o for o, verbs in _VERB_OPS.items() if sub.strip() in verbs), None)
    op = sub_op or _name_op(name)
    found: list[tuple[str, str]] = []
    for command_key in _COMMAND_KEYS:
        command = _command_text(args.get(command_key))
        if command is not None and sub_op is None:
            found.extend(command_paths(command))
    for key, value in _walk({k: v for k, v in args.items() if k not in _COMMAND_KEYS}, None):
        if not isinstance(value, str):
            continue
        by_key = key is not None and (key in _PATH_KEYS or key.endswith(("_path", "_file")))
        if (by_key and _plausible_path(value, spaces=True)) or _looks_like_path(value):
            found.append((value, op))
        elif key not in _CONTENT_KEYS:  # a file's new text names what it names, not a file
            found.extend((path, "unknown") for path in text_paths(value))
    return found


def _command_text(value: Any) -> str | None:
    """A shell command: a string, or an argv list (joined: no path spans two arguments)."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return value if isinstance(value, str) and value.strip() else None


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
        value = _command_text(args.get(key))
        # A lone editor sub-command ("view", "create") is not a shell command.
        if value is not None and value.strip() not in _SUBCOMMANDS:
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
    if status == "0" or (status is None and not (lines and _ERROR_LINE.search(lines[0]))):
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
                for c in constraints(text_of(message.get("content"), TEXT_ONLY))
            )
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, Mapping) else None
                if not isinstance(fn, Mapping):
                    continue
                paths, texts = _call_facts(str(fn.get("name") or ""), fn.get("arguments"))
                for path, op in paths:
                    found.append({"kind": "file", "path": path, "ops": [op]})
                commands = [{"kind": "command", "text": c} for c in texts]
                found.extend(commands)
                names = call_names(fn.get("arguments"))
                found.extend({"kind": "name", "text": n} for n in names)
                pending[str(call.get("id"))] = commands
        elif role == "tool":
            status, line = _result_facts(text_of(message.get("content"), TEXT_ONLY))
            for command in pending.pop(str(message.get("tool_call_id")), []):
                if status is not None:
                    command["exit"] = status
            if line is not None:
                found.append({"kind": "error", "text": line})
    return found


# Tool results at least this long have their scans remembered (shorter ones are scanned
# faster than looked up), up to this many characters in all, the least recent forgotten first.
# A lookup hashes the text once: the same string object, as the session's kept history hands
# it to each request, keeps its hash and compares by identity.
REMEMBERED_MIN_CHARS = 1024
REMEMBERED_MAX_CHARS = 16 * 2**20
_remembered: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
_remembered_chars = [0]


REMEMBERED_CALLS = 8192
_remembered_calls: OrderedDict[tuple[str, str], tuple[list[tuple[str, str]], list[str]]] = (
    OrderedDict()
)


def _call_facts(name: str, arguments: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """(`call_paths(name, arguments)`, `_commands(arguments)`), remembered for the last
    `REMEMBERED_CALLS` calls whose arguments are a JSON string (as every wire sends them).
    The lists are shared: callers only read them."""
    if not isinstance(arguments, str):
        return call_paths(name, arguments), _commands(arguments)
    key = (name, arguments)
    found = _remembered_calls.get(key)
    if found is not None:
        _remembered_calls.move_to_end(key)
        return found
    found = call_paths(name, arguments), _commands(arguments)
    _remembered_calls[key] = found
    if len(_remembered_calls) > REMEMBERED_CALLS:
        _remembered_calls.popitem(last=False)
    return found


def _result_facts(result: str) -> tuple[str | None, str | None]:
    """(`exit_status(result)`, `error_line(result)`), remembered for long results."""
    if len(result) < REMEMBERED_MIN_CHARS:
        return exit_status(result), error_line(result)
    found = _remembered.get(result)
    if found is not None:
        _remembered.move_to_end(result)
        return found
    found = exit_status(result), error_line(result)
    _remembered[result] = found
    _remembered_chars[0] += len(result)
    while _remembered_chars[0] > REMEMBERED_MAX_CHARS and _remembered:
        old, _ = _remembered.popitem(last=False)
        _remembered_chars[0] -= len(old)
    return found


def forget() -> None:
    """Drop the remembered scans (kept only for speed): the idle reclaimer's release."""
    _remembered.clear()
    _remembered_chars[0] = 0
    _remembered_calls.clear()
