"""Typed conversation messages: each builds its own OpenAI request param and its saved form.

`SystemPrompt` (the prompt, or a summary, plus named sections kept through compaction),
`UserMessage` (text and normalised images) and `RawOpenAIMessage` (any OpenAI message dict
kept exactly as received). `message_from_json` reads the saved form back.
"""

from __future__ import annotations

import base64
import io
import json
import mimetypes
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from proxy.content_text import TextForm, text_of
from proxy.errors import UnreadableInput
from proxy.rules import COMPACTED_SYSTEM_PROMPT, format_compacted_summary

__all__ = [
    "COMPACTED_SYSTEM_PROMPT",
    "Content",
    "ConversationFormatError",
    "Message",
    "RawOpenAIMessage",
    "SystemPrompt",
    "UserMessage",
    "content_to_text",
    "image_to_url",
    "measure",
    "message_from_json",
    "tool_result_text",
    "unreclaimed_param",
    "user_content",
]

JSONDict: TypeAlias = dict[str, Any]
Content: TypeAlias = str | list[JSONDict]

TRUNCATE_AT = 1000

_MEASURED_FIELDS = frozenset({"content", "text", "reasoning", "reasoning_content"})
# Keys a wire adapter adds to a neutral message for itself (its original items): not text
# the model reads a second time.
WIRE_PRIVATE_PREFIX = "x_"

SCHEMA_INSTRUCTION = (
    "Respond with a single JSON object that conforms to this JSON schema:\n```json\n{schema}\n```"
)


class ConversationFormatError(UnreadableInput, ValueError):
    """A saved conversation or message has a shape this version cannot read."""


@dataclass
class SystemPrompt:
    """The system message: prompt text or, when `is_compressed`, a summary; plus sections.

    `persist_sections` (name -> text, in insertion order) survive compaction and are sent
    after the prompt unchanged. `trail` (see `proxy.trail`), kept with a summary, is sent
    inside the summary's data fence; like the sections, it survives compaction by merging,
    so `text(with_sections=False)` (what a new summary reads) leaves it out.
    """

    content: str = ""
    is_compressed: bool = False
    persist_sections: dict[str, str] = field(default_factory=dict)
    trail: dict[str, Any] | None = None

    @property
    def role(self) -> Literal["system"]:
        return "system"

    def text(self, *, with_sections: bool = True) -> str:
        head = self.content
        if self.is_compressed:
            head = format_compacted_summary(head, self.trail if with_sections else None)
        parts = [head, *(self.persist_sections.values() if with_sections else ())]
        # Skipping empty parts keeps a lone section byte-identical to the client's prompt.
        return "\n\n".join(part for part in parts if part)

    def completion_param(self) -> JSONDict:
        return {"role": "system", "content": self.text()}

    def to_json(self) -> JSONDict:
        return {
            "kind": "system",
            "content": self.content,
            "is_compressed": self.is_compressed,
            "persist_sections": dict(self.persist_sections),
            **({"trail": self.trail} if self.trail else {}),
        }


@dataclass
class UserMessage:
    """A user turn. `param` is the client's own dict, when built by `from_param`."""

    content: Content
    response_schema: JSONDict | None = None
    param: JSONDict | None = field(default=None, repr=False)

    @property
    def role(self) -> Literal["user"]:
        return "user"

    @classmethod
    def create(cls, content: Content, images: list[Any] | None = None) -> UserMessage:
        return cls(user_content(content, images))

    @classmethod
    def from_param(cls, param: JSONDict) -> UserMessage:
        return cls(param.get("content") or "", param=dict(param))

    def completion_param(self) -> JSONDict:
        content: Content = self.content
        if self.response_schema is not None:
            instruction = SCHEMA_INSTRUCTION.format(
                schema=json.dumps(self.response_schema, ensure_ascii=False, indent=2)
            )
            if isinstance(content, str):
                content = f"{content}\n\n{instruction}" if content else instruction
            else:
                content = [*content, {"type": "text", "text": instruction}]
        # Unknown fields of the client's dict (name, ...) travel on untouched.
        return {**(self.param or {"role": "user"}), "content": content}

    def to_json(self) -> JSONDict:
        return {
            "kind": "user",
            "content": self.content,
            "response_schema": self.response_schema,
            "param": self.param,
        }


@dataclass
class RawOpenAIMessage:
    """Any OpenAI message dict kept exactly as received (reasoning fields included).

    `key` names a tool result in the store of reclaimed originals; the conversation assigns
    it. The dict is copied on construction and only ever replaced, never edited in place, so
    the caller's dict is never changed.
    """

    raw: JSONDict
    key: str | None = None

    def __post_init__(self) -> None:
        self.raw = dict(self.raw)

    @property
    def role(self) -> str:
        return str(self.raw.get("role", ""))

    @property
    def content(self) -> Any:
        return self.raw.get("content")

    @property
    def tool_call_id(self) -> str | None:
        value = self.raw.get("tool_call_id")
        return None if value is None else str(value)

    def replace_content(self, content: Any) -> None:
        self.raw = {**self.raw, "content": content}

    def completion_param(self) -> JSONDict:
        return dict(self.raw)

    def to_json(self) -> JSONDict:
        saved: JSONDict = {"kind": "raw", "raw": self.raw}
        if self.key is not None:
            saved["key"] = self.key
        return saved


Message: TypeAlias = SystemPrompt | UserMessage | RawOpenAIMessage


def message_from_json(saved: Any) -> Message:
    """Read back what `to_json` wrote; `ConversationFormatError` names what is wrong."""
    if not isinstance(saved, dict):
        raise ConversationFormatError(f"a saved message must be an object, got {_kind(saved)}")
    kind = saved.get("kind")
    if kind == "system":
        content = saved.get("content", "")
        sections = saved.get("persist_sections") or {}
        if not isinstance(content, str):
            raise ConversationFormatError("a saved system message needs a string 'content'")
        if not isinstance(sections, dict) or not all(isinstance(v, str) for v in sections.values()):
            raise ConversationFormatError("'persist_sections' must map names to strings")
        trail = saved.get("trail")
        if not isinstance(trail, dict | None):
            raise ConversationFormatError("a saved 'trail' must be an object or null")
        compressed = bool(saved.get("is_compressed", False))
        return SystemPrompt(content, compressed, dict(sections), trail)
    if kind == "user":
        content = saved.get("content", "")
        schema, param = saved.get("response_schema"), saved.get("param")
        if not isinstance(content, str | list):
            raise ConversationFormatError("a saved user message needs 'content' text or parts")
        if not isinstance(schema, dict | None) or not isinstance(param, dict | None):
            raise ConversationFormatError("'response_schema' and 'param' must be objects or null")
        return UserMessage(content, schema, param)
    if kind == "raw":
        raw, key = saved.get("raw"), saved.get("key")
        if not isinstance(raw, dict):
            raise ConversationFormatError("a saved raw message needs a 'raw' object")
        return RawOpenAIMessage(raw, None if key is None else str(key))
    raise ConversationFormatError(
        f"unknown saved message kind {kind!r} (expected 'system', 'user' or 'raw')"
    )


def _kind(value: Any) -> str:
    return type(value).__name__


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _display_part(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
        return "[image]"
    return _json_text(part)


# Text parts, string parts as they are, Chat's and Responses' images as `[image]`, any other
# part (and a content that is not a list) as JSON.
DISPLAY = TextForm(part=_display_part, whole=_json_text)


def content_to_text(content: Any, truncate: bool = False) -> str:
    """Display text of a message content (`DISPLAY`): text parts joined, images as `[image]`."""
    text = text_of(content, DISPLAY)
    if truncate and len(text) > TRUNCATE_AT:
        return text[:TRUNCATE_AT] + "..."
    return text


def unreclaimed_param(message: Message, originals: dict[str, Content]) -> JSONDict:
    """A message's param as it was before a level-1 reclaim (its original content)."""
    param = message.completion_param()
    key = message.key if isinstance(message, RawOpenAIMessage) else None
    return param if key not in originals else {**param, "content": originals[key]}


def message_chars(param: dict[str, Any]) -> int:
    """Characters a model reads in one message param: text, tool-call names and arguments,
    reasoning (`measure` counts only the text fields the spec names)."""
    content = param.get("content")
    total = len(content) if type(content) is str else len(content_to_text(content))
    for name in ("reasoning", "reasoning_content"):
        value = param.get(name)
        if isinstance(value, str):
            total += len(value)
    for call in param.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            total += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return total


def measure(value: Any) -> int:
    """Characters in content/text/reasoning fields, recursing into nested dicts and lists."""
    if isinstance(value, dict):
        total = 0
        for name, item in value.items():
            if name.startswith(WIRE_PRIVATE_PREFIX):
                continue  # a wire's own copy of what the message says (proxy.wire.base)
            if isinstance(item, str):
                total += len(item) if name in _MEASURED_FIELDS else 0
            else:
                total += measure(item)
        return total
    if isinstance(value, list):
        return sum(measure(item) for item in value)
    return 0


def tool_result_text(content: Any) -> str:
    """A tool result as text: a string as is, `value_str()` when it has one, else JSON."""
    if isinstance(content, str):
        return content
    try:
        value_str = getattr(content, "value_str", None)
        text = value_str() if callable(value_str) else json.dumps(content, ensure_ascii=False)
        if not isinstance(text, str):
            raise TypeError(f"value_str() returned {type(text).__name__}, not str")
        return text
    # A tool's own serialiser may raise anything; the model must still get a result.
    except Exception as exc:
        return f"[Error] Failed to serialize tool result: {type(exc).__name__}: {exc}"


def user_content(text: Content, images: list[Any] | None = None) -> Content:
    """User content: the text alone, or text and image_url parts when there are images."""
    if not images:
        return text
    parts: list[JSONDict] = []
    if isinstance(text, str):
        if text:
            parts.append({"type": "text", "text": text})
    else:
        parts.extend(text)
    parts.extend({"type": "image_url", "image_url": {"url": image_to_url(i)}} for i in images)
    return parts


_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def _sniff_mime(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for signature, mime in _SIGNATURES:
        if data.startswith(signature):
            return mime
    return None


def _data_url(data: bytes, guessed: str | None) -> str:
    mime = _sniff_mime(data) or guessed
    if mime is None or not mime.startswith("image/"):
        raise ValueError("image bytes are not a recognised image format (png/jpeg/gif/webp/bmp)")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_to_url(image: Any) -> str:
    """Normalise an image to a URL a model accepts: `data:` or `http(s)`.

    Accepts http(s)/data URL strings (kept), bytes (mime sniffed), a file path, or a PIL
    image (sent as PNG) when PIL is installed.
    """
    if isinstance(image, bytes | bytearray | memoryview):
        return _data_url(bytes(image), None)
    if isinstance(image, str) and image.lower().startswith(("http://", "https://", "data:")):
        return image
    if isinstance(image, str | os.PathLike):
        path = Path(image)
        return _data_url(path.read_bytes(), mimetypes.guess_type(path.name)[0])
    png = _pil_png(image)
    if png is not None:
        return _data_url(png, "image/png")
    raise TypeError(f"unsupported image input of type {_kind(image)}")


_PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"})


def _pil_png(image: Any) -> bytes | None:
    # A PIL image can only exist once PIL is imported, so never import it just to check.
    if "PIL.Image" not in sys.modules:
        return None
    from PIL import Image

    if not isinstance(image, Image.Image):
        return None
    if image.mode not in _PNG_MODES:
        image = image.convert("RGBA")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
