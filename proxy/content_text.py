"""A message content as text: `text_of`, the one function that writes a content (a string, a
list of parts, or other JSON) as one string, with the options a `TextForm` gives (separator,
which keys hold a part's text, how other parts and non-list contents appear).

At the bottom of the seed's imports, so every module may use it. Each caller keeps its form
beside it (`DISPLAY` in `conversation_message`, `VIEWER` in `admin.view`, `TOOL_OUTPUT` and
`PLAIN` in `session/`); `TEXT_ONLY` and `TEXT_AND_REFUSALS` are here. Pure code: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["TEXT_AND_REFUSALS", "TEXT_ONLY", "TextForm", "text_of"]


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
