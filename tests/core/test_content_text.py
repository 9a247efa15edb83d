"""One content-to-text (`proxy.artifacts.text_of`) and the forms its callers use,
pinned by a golden table: the part shapes of Chat Completions, Responses and Messages -> the
exact text each form writes.

Forms: DISPLAY (`content_to_text`: histories, sizes, the seed), VIEWER (the admin viewer),
TOOL_OUTPUT (a tool output the proxy hands on as text; never empty), PLAIN (tool results and
system prompts as the session keys and summaries read them: parts run together),
TEXT_AND_REFUSALS (Responses messages), TEXT_ONLY (artifacts).
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.admin.view import VIEWER, content_text
from proxy.content_text import TEXT_AND_REFUSALS, TEXT_ONLY, TextForm, text_of
from proxy.conversation_message import DISPLAY, content_to_text
from proxy.session.extract_tool import PLAIN
from proxy.session.extract_tool import content_text as plain_text
from proxy.session.tool_output import TOOL_OUTPUT, as_text
from proxy.wire.responses.to_neutral import parts_text

# (case, content, (DISPLAY, VIEWER, TOOL_OUTPUT, PLAIN, TEXT_AND_REFUSALS, TEXT_ONLY))
GOLDEN: list[tuple[str, Any, tuple[str, str, str, str, str, str]]] = [
    (
        "none",
        None,
        ("", "", "[The tool returned no output.]", "", "", ""),
    ),
    (
        "string",
        "plain é",
        ("plain é", "plain é", "plain é", "plain é", "plain é", "plain é"),
    ),
    (
        "empty string",
        "",
        ("", "", "[The tool returned no output.]", "", "", ""),
    ),
    (
        "chat text parts",
        [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        ("a\nb", "a\nb", "a\nb", "ab", "a\nb", "a\nb"),
    ),
    (
        "responses text parts",
        [
            {"type": "input_text", "text": "a"},
            {"type": "output_text", "text": "b", "annotations": []},
        ],
        ("a\nb", "a\nb", "a\nb", "ab", "a\nb", "a\nb"),
    ),
    (
        "refusal part",
        [{"type": "refusal", "refusal": "no"}],
        (
            '{"type": "refusal", "refusal": "no"}',
            "no",
            '{"type":"refusal","refusal":"no"}',
            "",
            "no",
            "",
        ),
    ),
    (
        "chat image",
        [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}],
        ("[image]", "[image]", "[image omitted: image/png, 8 bytes]", "", "", ""),
    ),
    (
        "responses image",
        [{"type": "input_image", "image_url": "https://x.test/y.png", "detail": "auto"}],
        ("[image]", "[image]", "[image omitted: https://x.test/y.png]", "", "", ""),
    ),
    (
        "messages image",
        [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            }
        ],
        (
            '{"type": "image", "source": {"type": "base64", "media_type": "image/png", '
            '"data": "iVBORw0KGgo="}}',
            "[image]",
            "[image omitted: image/png, 8 bytes]",
            "",
            "",
            "",
        ),
    ),
    (
        "messages document",
        [
            {
                "type": "document",
                "source": {"type": "url", "url": "https://x.test/a.pdf"},
                "title": "a.pdf",
            }
        ],
        (
            '{"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}, '
            '"title": "a.pdf"}',
            "[document: a.pdf]",
            "[document omitted: a.pdf, https://x.test/a.pdf]",
            "",
            "",
            "",
        ),
    ),
    (
        "responses file",
        [{"type": "input_file", "filename": "r.pdf", "file_id": "file-1"}],
        (
            '{"type": "input_file", "filename": "r.pdf", "file_id": "file-1"}',
            "[file: r.pdf]",
            "[file omitted: r.pdf, file-1]",
            "",
            "",
            "",
        ),
    ),
    (
        "chat file",
        [
            {
                "type": "file",
                "file": {"filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBE"},
            }
        ],
        (
            '{"type": "file", "file": {"filename": "r.pdf", '
            '"file_data": "data:application/pdf;base64,JVBE"}}',
            "[file]",
            "[file omitted: no source]",
            "",
            "",
            "",
        ),
    ),
    (
        "chat audio",
        [{"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}],
        (
            '{"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}',
            "[audio]",
            '{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}}',
            "",
            "",
            "",
        ),
    ),
    (
        "messages tool_result",
        [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]}],
        (
            '{"type": "tool_result", "tool_use_id": "t1", '
            '"content": [{"type": "text", "text": "r"}]}',
            "r",
            '{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}]}',
            "",
            "",
            "",
        ),
    ),
    (
        "string and number parts",
        ["raw", 7],
        ("raw\n7", "raw\n7", "raw\n7", "raw7", "", ""),
    ),
    (
        "unknown part",
        [{"type": "text", "text": "é"}, {"type": "x", "v": "é"}],
        (
            'é\n{"type": "x", "v": "é"}',
            'é\n{"type": "x", "v": "é"}',
            'é\n{"type":"x","v":"é"}',
            "é",
            "é",
            "é",
        ),
    ),
    (
        "object content",
        {"k": "v"},
        ('{"k": "v"}', '{"k": "v"}', '{"k":"v"}', '{"k":"v"}', "", ""),
    ),
    (
        "empty list",
        [],
        ("", "", "[The tool returned no output.]", "", "", ""),
    ),
    (
        "empty text part",
        [{"type": "text", "text": ""}],
        ("", "", "[The tool returned no output.]", "", "", ""),
    ),
    (
        "text then image",
        [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": "https://x.test/p.png"}},
        ],
        (
            "see\n[image]",
            "see\n[image]",
            "see\n[image omitted: https://x.test/p.png]",
            "see",
            "see",
            "see",
        ),
    ),
    (
        "text not a string",
        [{"type": "output_text", "text": None, "refusal": "no"}, {"type": "text", "text": 5}],
        (
            '{"type": "output_text", "text": null, "refusal": "no"}\n{"type": "text", "text": 5}',
            'no\n{"type": "text", "text": 5}',
            '{"type":"output_text","text":null,"refusal":"no"}\n{"type":"text","text":5}',
            "5",
            "",
            "",
        ),
    ),
]

FORMS: list[tuple[str, TextForm]] = [
    ("display", DISPLAY),
    ("viewer", VIEWER),
    ("tool_output", TOOL_OUTPUT),
    ("plain", PLAIN),
    ("text_and_refusals", TEXT_AND_REFUSALS),
    ("text_only", TEXT_ONLY),
]
EMPTY = as_text(None)


@pytest.mark.parametrize(("case", "content", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_each_callers_text_is_pinned(case: str, content: Any, expected: tuple[str, ...]) -> None:
    display, viewer, tool_output, plain, parts, text_only = expected
    assert content_to_text(content) == display
    assert content_text(content) == viewer
    assert as_text(content) == tool_output
    assert plain_text(content) == plain
    assert parts_text(content) == parts
    assert text_of(content, TEXT_ONLY) == text_only  # the artifact trail's reading


@pytest.mark.parametrize(("case", "content", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_the_one_function_writes_every_form(
    case: str, content: Any, expected: tuple[str, ...]
) -> None:
    """The callers' functions are `text_of` with their form (TOOL_OUTPUT adds only its
    marker for an empty output)."""
    for (name, form), text in zip(FORMS, expected, strict=True):
        got = text_of(content, form)
        if name == "tool_output" and text == EMPTY:
            assert got == ""
        else:
            assert got == text, name


def test_the_options() -> None:
    parts = [{"type": "text", "text": "a"}, "s", {"type": "refusal", "refusal": "r"}, 3]
    form = TextForm(part=lambda p: f"<{p}>" if isinstance(p, int) else None, whole=repr)
    assert text_of(parts, form) == "a\n<3>"
    assert text_of(parts, TextForm(part=str, whole=repr, sep=" | ")) == (
        "a | s | {'type': 'refusal', 'refusal': 'r'} | 3"
    )
    assert text_of(parts, TextForm(part=lambda p: None, whole=repr, text_keys=("refusal",))) == "r"
    # The first of `text_keys` a part has decides, even when its value is not a string.
    odd = [{"text": None, "refusal": "r"}]
    assert (
        text_of(odd, TextForm(part=lambda p: "?", whole=repr, text_keys=("text", "refusal"))) == "?"
    )
    assert text_of({"k": 1}, form) == "{'k': 1}"
    assert text_of(None, form) == "" and text_of("as is", form) == "as is"


def test_truncation_of_the_display_text() -> None:
    long = [{"type": "text", "text": "x" * 1500}]
    assert content_to_text(long, truncate=True) == "x" * 1000 + "..."
    assert content_text(long, truncate=True) == "x" * 1000 + "..."
