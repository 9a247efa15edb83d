"""The code names a tool call's arguments use, for the artifact trail (`proxy.trail`).

A summary paraphrases what an agent wrote in a script or an edit; the names in it (dotted,
snake_case, camelCase or digit-bearing names of at least 6 characters, and plain words
called, `word(`) are what its next actions tend to use again. Read from the arguments' string
values (a JSON string or an object), outside paths and file names (the trail's files list
has those), each value scanned up to `MAX_NAME_SCAN` characters. Pure code: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["FILE_EXTENSIONS", "MAX_CALL_NAMES", "call_names", "walk"]

MAX_CALL_NAMES = 40  # code names kept from one tool call's arguments, in order
MAX_NAME_SCAN = 20_000  # characters of one argument value scanned for names

FILE_EXTENSIONS = (  # of source, text and data files
    "py|pyi|js|jsx|ts|tsx|mjs|cjs|rs|go|c|h|cc|cpp|hpp|java|kt|rb|php|cs|swift|scala|ex|exs"
    "|erl|hs|ml|lua|pl|sh|bash|zsh|sql|md|rst|txt|json|jsonl|toml|ya?ml|cfg|ini|lock"
    "|xml|html|css|scss|csv|tsv|log|ipynb|pony|proto|gradle|mk|cmake|patch|diff"
)


def walk(value: Any, key: str | None) -> Iterator[tuple[str | None, Any]]:
    """Every leaf of a JSON value with the (lower-cased) key it sits under."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from walk(v, str(k).lower())
    elif isinstance(value, list):
        for item in value:
            yield from walk(item, key)
    else:
        yield key, value


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME_MARK = re.compile(r"[_.\d]|[a-z][A-Z]")
_FILE_NAME = re.compile(rf".*\.(?:{FILE_EXTENSIONS})", re.IGNORECASE)


def call_names(arguments: Any) -> list[str]:
    """The code names one tool call's arguments use, in order, each once, at most
    `MAX_CALL_NAMES`: dotted, snake_case, camelCase or digit-bearing names of at least 6
    characters, and plain words called (`word(`), outside paths and file names. What an agent
    wrote in a script or an edit it tends to write again; a summary paraphrases it away."""
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except ValueError:
            args = arguments
    found: dict[str, None] = {}
    for _, value in walk(args, None):
        if not isinstance(value, str):
            continue
        text = value[:MAX_NAME_SCAN]
        for match in _NAME.finditer(text):
            name, start, end = match.group(), match.start(), match.end()
            if len(name) < 6 or text[start - 1 : start] in ("/", "-", "$"):
                continue
            if text[end : end + 1] == "/" or _FILE_NAME.fullmatch(name):
                continue
            if _NAME_MARK.search(name) or text[end : end + 1] == "(":
                found.setdefault(name)
                if len(found) == MAX_CALL_NAMES:
                    return list(found)
    return list(found)
