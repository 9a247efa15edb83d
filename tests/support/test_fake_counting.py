"""The counting fakes bill and refuse by their own count, each in its API's exact shape."""

from __future__ import annotations

import math

import anthropic
import openai
import pytest

from tests.support.fake_counting import (
    ScaledMessages,
    ScaledResponses,
    ScaledUpstream,
    ToolBlindUpstream,
    chat_refusals,
)
from tests.support.fake_messages import count_input_tokens as messages_tokens
from tests.support.fake_responses import count_input_tokens as responses_tokens
from tests.support.fake_upstream import Reply, count_prompt_tokens

CALL = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Read it."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "x" * 4000},
]


def test_a_tool_blind_template_bills_without_tool_messages() -> None:
    with (
        ToolBlindUpstream() as fake,
        openai.OpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client,
    ):
        fake.push(Reply.text("ok"))
        done = client.chat.completions.create(model="m", messages=HISTORY)  # type: ignore[arg-type]
        blind = count_prompt_tokens({"messages": HISTORY[:3]})
        assert done.usage is not None and done.usage.prompt_tokens == blind
        assert blind < count_prompt_tokens({"messages": HISTORY}) - 900
        # The tool result does not count against the window either.
        fake.context_window = blind
        client.chat.completions.create(model="m", messages=HISTORY)  # type: ignore[arg-type]
        assert chat_refusals(fake) == []


def test_a_scaled_count_bills_and_refuses_in_openais_shape() -> None:
    with (
        ScaledUpstream(scale=1.5) as fake,
        openai.OpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client,
    ):
        done = client.chat.completions.create(model="m", messages=HISTORY)  # type: ignore[arg-type]
        billed = math.ceil(1.5 * count_prompt_tokens({"messages": HISTORY}))
        assert done.usage is not None and done.usage.prompt_tokens == billed
        fake.reset()
        fake.context_window = billed - 1
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=HISTORY)  # type: ignore[arg-type]
        assert refused.value.body == {
            "message": (
                f"This model's maximum context length is {billed - 1} tokens. However, your "
                f"messages resulted in {billed} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        assert [tokens for _, tokens in chat_refusals(fake)] == [billed]


def test_the_responses_api_refuses_in_its_shape() -> None:
    items = [{"role": "user", "content": "y" * 2000}]
    with (
        ScaledResponses(scale=1.5) as fake,
        openai.OpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client,
    ):
        done = client.responses.create(model="m", input=items)  # type: ignore[arg-type]
        billed = math.ceil(1.5 * responses_tokens({"input": items}))
        assert done.usage is not None and done.usage.input_tokens == billed
        fake.context_window = billed - 1
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="m", input=items)  # type: ignore[arg-type]
        assert refused.value.body == {
            "message": (
                "Your input exceeds the context window of this model. Please adjust your input "
                "and try again."
            ),
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }


def test_the_messages_api_refuses_in_its_shape() -> None:
    messages = [{"role": "user", "content": "z" * 6000}]
    system = [{"type": "text", "text": "s" * 5000, "cache_control": {"type": "ephemeral"}}]
    body = {"model": "claude-opus-4-8", "max_tokens": 64, "system": system, "messages": messages}
    with (
        ScaledMessages(scale=1.5) as fake,
        anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-test", max_retries=0) as c,
    ):
        billed = math.ceil(1.5 * messages_tokens(body))
        assert (
            c.messages.count_tokens(
                **{k: body[k] for k in ("model", "system", "messages")}
            ).input_tokens
            == billed
        )  # type: ignore[arg-type]
        for _ in range(2):  # a cache write, then a cache read: the parts add up either way
            usage = c.messages.create(**body).usage  # type: ignore[arg-type]
            parts = usage.input_tokens + (usage.cache_creation_input_tokens or 0)
            assert parts + (usage.cache_read_input_tokens or 0) == billed
        assert usage.cache_read_input_tokens
        fake.context_window = billed - 1
        with pytest.raises(anthropic.BadRequestError) as refused:
            c.messages.create(**body)  # type: ignore[arg-type]
        assert refused.value.body["error"] == {  # type: ignore[index]
            "type": "invalid_request_error",
            "message": f"prompt is too long: {billed} tokens > {billed - 1} maximum",
        }
