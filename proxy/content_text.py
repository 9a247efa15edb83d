"""A message content as text: `text_of`, the one function that writes a content (a string, a
list of parts, or other JSON) as one string, with the options a `TextForm` gives (separator,
which keys hold a part's text, how other parts and non-list contents appear); and what such
a text shows when it is a tool result (`exit_status`, `error_line`), for the artifact trail.

A tool result is client content (a web page, a file, a command's output), so those scans
are linear in what they read and read a bounded part of it: the first and the last
`WINDOW_CHARS` characters of a longer result (`window`), where commands print their status
and their errors. No pattern can backtrack over a run of text: the exit status patterns are
tried only where their literal key stands (`str.find`, on lower-cased text where the pattern
ignores case), with possessive quantifiers; the error patterns open with a character class
the search skips on, and look behind for their word boundary.

At the bottom of the seed's imports, so every module may use it. Each caller keeps its form
beside it (`DISPLAY` in `conversation_message`, `VIEWER` in `admin.view`, `TOOL_OUTPUT` and
`PLAIN` in `session/`); `TEXT_ONLY` and `TEXT_AND_REFUSALS` are here. Pure code: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TEXT_AND_REFUSALS",
    "TEXT_ONLY",
    "WINDOW_CHARS",
    "TextForm",
    "error_line",
    "exit_status",
    "one_line",
    "text_of",
    "window",
]


@dataclass(frozen=True)
class TextForm:
    """How `text_of` writes a message content (a string, a list of parts, or other JSON) as
    one string. Each caller's form is pinned by tests/core/test_content_text.py."""

    part: Callable[[Any], str | None]
    """A part with no text under `text_keys` (a string part, an image, a file, an unknown
    part): its text, or None to leave it out."""
    whole: Callable[[Any], str]
    """A content that is neither None, a string nor a list."""
    sep: str = "\n"
    """Between the parts' texts."""
    text_keys: tuple[str, ...] = ("text",)
    """A dict part's text: the value of the first of these keys the part has, if a string."""


def text_of(content: Any, form: TextForm) -> str:
    """A message content as text, written as `form` says: None is "", a string itself, a
    list its parts' texts joined by `form.sep`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return form.whole(content)
    pieces = []
    for part in content:
        text = None
        if isinstance(part, dict):
            for key in form.text_keys:
                if key in part:
                    value = part[key]
                    text = value if isinstance(value, str) else None
                    break
        if text is None:
            text = form.part(part)
        if text is not None:
            pieces.append(text)
    return pieces[0] if len(pieces) == 1 else form.sep.join(pieces)


def _left_out(value: Any) -> None:
    return None


def _no_text(value: Any) -> str:
    return ""


# Only the text parts (what a model wrote or read as text); nothing else, not even a
# string part.
TEXT_ONLY = TextForm(part=_left_out, whole=_no_text)
# Text parts and refusal parts (Chat's and Responses' assistant refusals).
TEXT_AND_REFUSALS = TextForm(part=_left_out, whole=_no_text, text_keys=("text", "refusal"))


# -- tool results: exit status and error line -----------------------------------------------

MAX_TEXT = 200  # characters of one error line
WINDOW_CHARS = 16 * 1024  # read at each end of a longer result

# (key, pattern, key found in lower-cased text): possessive quantifiers, never two
# unbounded runs over the same characters.
_EXIT_STATUS: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    ("<returncode>", re.compile(r"<returncode>\s*+(-?\d+)\s*+</returncode>"), False),
    (
        "exit",
        re.compile(r"\bexit(?:ed)?\s++(?:code|status)\s*+(?:[:=]\s*+)?(-?\d+)", re.IGNORECASE),
        True,
    ),
    (
        "process exited with code",
        re.compile(r"\bprocess exited with code\s*+(-?\d+)", re.IGNORECASE),
        True,
    ),
    ("return", re.compile(r"\breturn(?:ed)?\s++code\s*+(?:[:=]\s*+)?(-?\d+)", re.IGNORECASE), True),
)
# A line that reads as an error: a name ending in Error or Exception (then ":" or the end),
# "error:", "Error:", FAILED, FATAL, ERROR, "No such file or directory", "command not
# found", "Permission denied", "panic:". Each branch opens with its first character and then
# asks for a word boundary before it (a look-behind), so the search skips every character that
# opens no branch (a run of white space costs almost nothing) and tries no branch twice.
_ERROR_BRANCHES = (
    r"[A-Zecp](?:(?<=[A-Z])(?<!\w[A-Z])\w*(?:Error|Exception)\b(?::|{end})"
    r"|(?<=e)(?<!\we)rror(?:\[\w+\])?:|(?<=E)(?<!\wE)rror\b:|(?<=F)(?<!\wF)AILED\b"
    r"|(?<=F)(?<!\wF)ATAL\b|(?<=E)(?<!\wE)RROR\b|(?<=N)o such file or directory"
    r"|(?<=c)ommand not found|(?<=P)ermission denied|(?<=p)(?<!\wp)anic(?:ked)?\b:)"
)
_ERROR_LINE = re.compile(_ERROR_BRANCHES.format(end="$"))  # in one stripped line
# The same over lines of a text (a line's end: after its trailing blanks).
_ERROR_IN_LINE = re.compile(_ERROR_BRANCHES.format(end=r"[^\S\n]*+$"), re.MULTILINE)
# One of these stands in every line `_ERROR_LINE` finds.
_ERROR_KEYS = (
    "Error",
    "Exception",
    "error",
    "FAILED",
    "FATAL",
    "ERROR",
    "No such file or directory",
    "command not found",
    "Permission denied",
    "panic",
)
_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"^[^\S\n]*+[\w.]*(?:Error|Exception|Exit|Interrupt)\b", re.MULTILINE)
_WRAPPER = re.compile(r"</?(?:returncode|output)>(?:-?\d+</returncode>)?$")
_ODD_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_ANY_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_BREAK = re.compile("\r\n?|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_NON_BLANK = re.compile(r"\S")


def window(result: str) -> str:
    """The part of a result the scans read: all of it, or its two ends (a line break
    between them, so that no line spans the cut)."""
    if len(result) <= 2 * WINDOW_CHARS:
        return result
    return result[:WINDOW_CHARS] + "\n" + result[-WINDOW_CHARS:]


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    """The first non-blank line of `text`, stripped and cut to `limit` characters."""
    start = _NON_BLANK.search(text)
    if start is None:
        return ""
    end = _ANY_BREAK.search(text, start.start())
    line = text[start.start() : len(text) if end is None else end.start()].strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def exit_status(result: str) -> str | None:
    """The exit status a result shows ("Exit code: 1", "<returncode>0</returncode>", ...)."""
    text = window(result)
    lower = text.lower()
    folded = lower if len(lower) == len(text) else None  # same positions
    for key, pattern, ignore_case in _EXIT_STATUS:
        match = _at_keys(pattern, text, (folded if ignore_case else text), key)
        if match is not None:
            return match.group(1)
    return None


def _at_keys(
    pattern: re.Pattern[str], text: str, keyed: str | None, key: str
) -> re.Match[str] | None:
    """`pattern.search(text)`, tried only where `key` stands in `keyed`."""
    if keyed is None:
        return pattern.search(text)
    at = keyed.find(key)
    while at >= 0:
        match = pattern.match(text, at)
        if match is not None:
            return match
        at = keyed.find(key, at + 1)
    return None


def error_line(result: str) -> str | None:
    """The error line of a result that looks like a failure, else None.

    A failure: a traceback, a non-zero exit status, or a first output line that reads as an
    error. The line: a traceback's exception line, else the first line that reads as one.
    """
    text = window(result)
    if _ODD_BREAK.search(text):
        text = _BREAK.sub("\n", text)  # the line breaks `str.splitlines` knows, as "\n"
    if _has_traceback(text):
        end = _last_exception_line(text)
        if end is not None:
            return one_line(end)
    status = exit_status(result)
    if status == "0":
        return None
    if status is None:
        first = _first_line(text)
        if first is None or not _reads_as_error(first):
            return None
    line = _first_error_line(text)
    return None if line is None else one_line(line)


def _reads_as_error(line: str) -> bool:
    return any(key in line for key in _ERROR_KEYS) and _ERROR_LINE.search(line) is not None


def _line_around(text: str, at: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return start, len(text) if end < 0 else end


def _first_line(text: str) -> str | None:
    """The first line with text that is not a bare wrapper tag, stripped."""
    at = 0
    while (found := _NON_BLANK.search(text, at)) is not None:
        start, end = _line_around(text, found.start())
        line = text[start:end].strip()
        if not _WRAPPER.match(line):
            return line
        at = end
    return None


def _has_traceback(text: str) -> bool:
    """Whether a line starts (after blanks) with a traceback's heading."""
    at = text.find(_TRACEBACK)
    while at >= 0:
        start, end = _line_around(text, at)
        if not text[start:at].strip():
            return True
        at = text.find(_TRACEBACK, end)
    return False


def _first_error_line(text: str) -> str | None:
    """The first line (stripped) that reads as an error, not a traceback's heading."""
    at = 0
    while (found := _ERROR_IN_LINE.search(text, at)) is not None:
        start, end = _line_around(text, found.start())
        line = text[start:end].strip()
        if not line.startswith(_TRACEBACK):
            return line
        at = end
    return None


def _last_exception_line(text: str) -> str | None:
    """The last line (stripped) that opens with an exception's name."""
    last = next(reversed(list(_EXCEPTION_LINE.finditer(text))), None)
    if last is None:
        return None
    start, end = _line_around(text, last.start())
    return text[start:end].strip()
