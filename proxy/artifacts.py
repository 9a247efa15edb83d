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
from proxy.content_text import TEXT_ONLY, error_line, exit_status, one_line, text_of, window

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
# Bounds on client content read: a command, free text or a user message up to SCAN_CHARS; a
# result's two ends (`content_text.window`); a span's newest messages within SPAN_SCAN_CHARS.
SCAN_CHARS = 16 * 1024
SPAN_SCAN_CHARS = 1024 * 1024
MESSAGE_CHARS = 64

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
# A scheme of at most 32 characters: no start tries more than that before `://`.
_URL = re.compile(r"[a-z][a-z0-9+.-]{0,31}://[^\s'\"`<>()\[\]{},;|]++", re.IGNORECASE)
_TOKEN = re.compile(r"[\w.~/+@-]+")
_SED_EXPRESSION = re.compile(r"s/[^/]*/[^/]*/[gip0-9]*")
_SEGMENT_SPLIT = re.compile(r"&&|\|\||[;|\n]")
_QUOTE = re.compile("['\"]")
_DOUBLE_QUOTED_BODY = re.compile(r'(?:[^"\\]++|\\.)*+')
_PATTERN_VERBS = frozenset({"sed", "awk", "grep", "egrep", "rg", "ag", "perl"})
_REDIRECT = re.compile(r"(?<![\d&])>>?\s*+([\w.~/+@-]++)")
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

_CONSTRAINT = re.compile(r"\b(?:do not|don't|dont|always|never|must)\b", re.IGNORECASE)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


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
    """The paths free text names (a task for a sub-agent, a patch, a description), in its
    first `SCAN_CHARS` characters."""
    text = text[:SCAN_CHARS]
    found = [url.group() for url in _URL.finditer(text)]
    for match in _TOKEN.finditer(_URL.sub(" ", text)):
        token = match.group().rstrip(".")
        if _clear_path(token):
            found.append(token)
    return found


def _unquoted(text: str) -> str:
    """`text` with each quoted span ('...', "..." with escapes) a space, in one pass: a quote
    that never closes is text, as is each later one its opening read past (none can close)."""
    out: list[str] = []
    at = 0
    single_open = double_open = 0  # quotes before these places cannot open a span
    while (start := _QUOTE.search(text, at)) is not None:
        quote = start.start()
        if text[quote] == "'":
            end = text.find("'", quote + 1) if quote >= single_open else -1
            if end < 0:
                single_open = len(text)
        else:
            body = _DOUBLE_QUOTED_BODY.match(text, quote + 1) if quote >= double_open else None
            stop = -1 if body is None else body.end()
            end = stop if 0 <= stop < len(text) and text[stop] == '"' else -1
            if end < 0:
                double_open = max(double_open, stop)
        if end < 0:
            out.append(text[at : quote + 1])
            at = quote + 1
        else:
            out.append(text[at:quote] + " ")
            at = end + 1
    out.append(text[at:])
    return "".join(out)


def command_paths(command: str) -> list[tuple[str, str]]:
    """(path, op) for the paths a shell command names, each a substring of `command`.

    The command's first `SCAN_CHARS` characters are read (a longer one is a here-document:
    the text of a file, not more paths)."""
    found: list[tuple[str, str]] = []
    for segment in _SEGMENT_SPLIT.split(command[:SCAN_CHARS]):
        words = [w for w in segment.split() if not _ENV_ASSIGNMENT.fullmatch(w)]
        while words and words[0] in ("sudo", "env", "time", "nohup", "exec", "cd"):
            words = words[2:] if words[0] == "cd" else words[1:]
        verb = words[0].rsplit("/", 1)[-1] if words else ""
        op = next((o for o, verbs in _VERB_OPS.items() if verb in verbs), "unknown")
        if verb == "sed":
            op = "edit" if any(w.startswith("-i") for w in words) else "read"
        if verb in _PATTERN_VERBS:
            segment = _unquoted(segment)  # a sed script or a search pattern, not a path
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
            single = "\n" not in arguments.strip()
            args = {"command" if single else "input": arguments}  # a free-form tool's input
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
            out.append(one_line(value, MAX_COMMAND))
    return out


def constraints(text: str) -> list[str]:
    """Sentences of a user message that state an explicit rule, verbatim (in its first
    `SCAN_CHARS` characters: a longer message is pasted text)."""
    out = []
    for sentence in _SENTENCE_SPLIT.split(text[:SCAN_CHARS]):
        sentence = sentence.strip()
        if sentence and len(sentence) <= MAX_TEXT and _CONSTRAINT.search(sentence):
            out.append(sentence)
    return out


def _charged(message: Mapping[str, Any]) -> int:
    """What reading `message` may cost, in characters (each message `MESSAGE_CHARS` more)."""
    role = message.get("role")
    if role == "assistant":
        cost = MESSAGE_CHARS
        for call in message.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, Mapping) else None
            arguments = fn.get("arguments") if isinstance(fn, Mapping) else None
            cost += min(len(arguments), SCAN_CHARS) if isinstance(arguments, str) else SCAN_CHARS
        return cost
    if role in ("user", "tool"):
        text = text_of(message.get("content"), TEXT_ONLY)
        return MESSAGE_CHARS + min(len(text), SCAN_CHARS if role == "user" else len(window(text)))
    return MESSAGE_CHARS


def _first_read(messages: Sequence[Mapping[str, Any]]) -> int:
    """The index of the oldest message read: the newest ones within `SPAN_SCAN_CHARS`."""
    left = SPAN_SCAN_CHARS
    for index in range(len(messages) - 1, -1, -1):
        left -= _charged(messages[index])
        if left < 0:
            return index + 1
    return 0


def entries_of(messages: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """The trail entries a span's newest messages (`_first_read`) give, in their order."""
    found: list[Entry] = []
    pending: dict[str, list[Entry]] = {}  # call id -> its command entries, awaiting a status
    for message in messages[_first_read(messages) :]:
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
