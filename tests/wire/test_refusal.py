"""One refusal reader: each provider's "prompt too long" refusal, as its server sends it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.wire.refusal import PHRASINGS, is_length_refusal, missing_tokens, window_of


def openai_error(message: str, code: str | None = "context_length_exceeded") -> dict[str, Any]:
    error = {"message": message, "type": "invalid_request_error", "param": "messages", "code": code}
    return {"error": error}


def anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


# (provider row, status, body as that server sends it, window, missing tokens)
CASES: list[tuple[str, int, Any, int | None, int | None]] = [
    (
        "openai",
        400,
        openai_error(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130532 tokens. Please reduce the length of the messages."
        ),
        128000,
        2532,
    ),
    (  # Azure OpenAI: OpenAI's words, its own error envelope fields
        "openai",
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your "
                "messages resulted in 9000 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
                "status": 400,
            }
        },
        8192,
        808,
    ),
    (  # vLLM's OpenAI-compatible server
        "openai",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        4096,
        904,
    ),
    (  # vLLM, newer wording
        "openai",
        400,
        openai_error(
            "This model's maximum context length is 2048 tokens. However, your request has "
            "3000 input tokens. Please reduce the length of the input messages.",
            code=None,
        ),
        2048,
        952,
    ),
    (  # OpenRouter
        "openai",
        400,
        {
            "error": {
                "message": "This endpoint's maximum context length is 200000 tokens. However, "
                "you requested about 250000 tokens (240000 of text input, 10000 in the output). "
                'Please reduce the length of either one, or use the "middle-out" transform.',
                "code": 400,
            }
        },
        200000,
        50000,
    ),
    (
        "anthropic",
        400,
        anthropic_error("prompt is too long: 210000 tokens > 200000 maximum"),
        200000,
        10000,
    ),
    (
        "anthropic-max-tokens",
        400,
        anthropic_error(
            "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, "
            "decrease input length or `max_tokens` and try again"
        ),
        200000,
        5192,
    ),
    (
        "llama.cpp",
        400,
        {
            "error": {
                "code": 400,
                "message": "request (4476 tokens) exceeds the available context size "
                "(4096 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 4476,
                "n_ctx": 4096,
            }
        },
        4096,
        380,
    ),
    (  # llama.cpp, a wording without the numbers: they come from the fields
        "generic",
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 1500,
                "n_ctx": 1024,
            }
        },
        1024,
        476,
    ),
    (
        "mistral",
        400,
        {
            "object": "error",
            "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model "
            "with 32768 maximum context length",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        },
        32768,
        7232,
    ),
    (  # Hugging Face text-generation-inference behind an OpenAI-compatible route
        "tgi",
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be "
            "<= 8192. Given: 9000 `inputs` tokens and 100 `max_new_tokens`",
            "error_type": "validation",
        },
        8192,
        908,
    ),
    (  # Gemini's OpenAI-compatible endpoint answers a list
        "gemini",
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": "The input token count (1200000) exceeds the maximum number of "
                    "tokens allowed (1048576).",
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        1048576,
        151424,
    ),
    (  # OpenAI Responses names no number
        "context-window",
        400,
        {
            "error": {
                "message": "Your input exceeds the context window of this model. Please adjust "
                "your input and try again.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        },
        None,
        None,
    ),
    (
        "context-window",
        400,
        openai_error("Request exceeds the context window of 131072 tokens.", code=None),
        131072,
        None,
    ),
    (  # Amazon Bedrock
        "generic",
        400,
        {"message": "Input is too long for requested model."},
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("row", "status", "body", "window", "missing"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_providers_refusal_is_read(
    row: str, status: int, body: Any, window: int | None, missing: int | None
) -> None:
    assert is_length_refusal(status, body)
    assert window_of(body) == window
    assert missing_tokens(body) == missing


def test_every_row_of_the_table_is_exercised() -> None:
    assert {p.provider for p in PHRASINGS} == {c[0] for c in CASES}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, openai_error("This model's maximum context length is 8192 tokens.")),
        (429, openai_error("Rate limit reached for requests", code="rate_limit_exceeded")),
        (400, openai_error("Invalid value for 'temperature'.", code="invalid_value")),
        (400, anthropic_error("messages: roles must alternate")),
        (400, None),
        (400, "upstream said no"),
        (400, []),
    ],
)
def test_other_errors_are_not_length_refusals(status: int, body: Any) -> None:
    assert not is_length_refusal(status, body)
    assert missing_tokens(body) is None


def test_the_code_alone_marks_a_refusal() -> None:
    assert is_length_refusal(413, openai_error("Request too large."))
    assert is_length_refusal(400, {"error": {"type": "exceed_context_size_error"}})
