"""A tool output as each place can carry it: whole, or with a marker for what it cannot.

The extract tool's answer is the original output (`proxy.session.extract_tool.answer_content`): a
string, or a list of parts (text, images, files, or a wire's own blocks and entries). Chat
Completions tool messages carry text only, so `chat_content` keeps the text parts in place and
puts a marker where a part cannot go (`[image omitted: image/png, 12345 bytes]`); `as_text`
is the same as one string, its parts on their own lines. Never an empty string. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.content_text import TextForm, text_of

EMPTY_OUTPUT = "[The tool returned no output.]"

# Parts whose payload is binary: named by a marker, never pasted as text.
_IMAGES = frozenset({"image_url", "input_image", "image"})
_FILES = frozenset({"input_file", "file", "document"})


def is_empty(content: Any) -> bool:
    return content is None or content == "" or content == []


def _size(data: str) -> int:
    """Bytes of base64 `data` once decoded."""
    data = data.strip()
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))


def _source(url: Any) -> str:
    """A data URL as `media/type, N bytes`; anything else (a URL, a file id) shortened."""
    text = str(url)
    head, sep, data = text.partition(";base64,")
    if sep and head.startswith("data:"):
        return f"{head[5:] or 'unknown type'}, {_size(data)} bytes"
    return text if len(text) <= 200 else text[:200] + "..."


def _image_source(part: dict[str, Any]) -> str:
    image = part.get("image_url")
    if isinstance(image, dict):
        image = image.get("url")
    source = part.get("source")
    if image is None and isinstance(source, dict):  # an Anthropic image block
        if source.get("type") == "base64":
            return f"{source.get('media_type')}, {_size(str(source.get('data') or ''))} bytes"
        image = source.get("url") or source.get("file_id")
    if image is None:
        image = part.get("file_id")
    return "no source" if image is None else _source(image)


def _file_source(part: dict[str, Any]) -> str:
    name = part.get("filename") or part.get("title")
    data = part.get("file_data")
    source = part.get("source")
    if isinstance(source, dict):  # an Anthropic document block
        if source.get("type") == "base64":
            data = f"data:{source.get('media_type')};base64,{source.get('data') or ''}"
        else:
            data = source.get("url") or source.get("file_id") or source.get("type")
    where = _source(data) if data else (part.get("file_id") or part.get("file_url") or "")
    return ", ".join(str(x) for x in (name, where) if x) or "no source"


def marker(part: Any) -> str | None:
    """What stands in for a part that text cannot carry; None for a part that is text."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in _IMAGES:
        return f"[image omitted: {_image_source(part)}]"
    if kind in _FILES:
        return f"[{'document' if kind == 'document' else 'file'} omitted: {_file_source(part)}]"
    return None


def _dumped(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _tool_part(part: Any) -> str:
    if isinstance(part, str):
        return part
    shown = marker(part)
    return _dumped(part) if shown is None else shown


# Text parts and string parts as they are, a marker for a part text cannot carry, any other
# entry (and a content that is not a list) as its JSON.
TOOL_OUTPUT = TextForm(part=_tool_part, whole=_dumped)


def part_text(part: Any) -> str:
    """One part as text: its text, a marker, or (an entry of another kind) its JSON."""
    return text_of([part], TOOL_OUTPUT)


def as_text(content: Any) -> str:
    """The output as one string: parts in order, each on its own line; never empty."""
    if is_empty(content):
        return EMPTY_OUTPUT
    return text_of(content, TOOL_OUTPUT) or EMPTY_OUTPUT


def chat_content(content: Any) -> str | list[dict[str, Any]]:
    """The output as a Chat Completions tool message's content: a string as is, a list as
    text parts in place (markers for the parts text cannot carry)."""
    if not isinstance(content, list) or is_empty(content):
        return as_text(content)
    return [{"type": "text", "text": part_text(p)} for p in content]
