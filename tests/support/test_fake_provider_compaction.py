"""The compacting fakes answer as the providers do: the official SDKs read their answers
into their own compaction types, and they refuse what the providers refuse (no proxy here).
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
from anthropic.types.beta import BetaCompactionBlock, BetaContextManagementResponse
from openai.types.responses import ResponseCompactionCompactingEvent, ResponseCompactionItem

from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_provider_compaction import (
    COMPACT_BETA,
    CONTEXT_BETA,
    SUMMARIZE_BETA,
    CompactingMessages,
    CompactingResponses,
)
from tests.support.fake_responses import Turn

USER = [{"role": "user", "content": "Read the files."}]


@pytest.fixture
def responses() -> Iterator[tuple[CompactingResponses, openai.OpenAI]]:
    with (
        CompactingResponses() as fake,
        openai.OpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as client,
    ):
        yield fake, client


@pytest.fixture
def messages() -> Iterator[tuple[CompactingMessages, anthropic.Anthropic]]:
    with (
        CompactingMessages() as fake,
        anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant", max_retries=0) as client,
    ):
        yield fake, client


def test_responses_trigger_answers_a_compaction_item_streamed_and_not(
    responses: tuple[CompactingResponses, openai.OpenAI],
) -> None:
    fake, client = responses
    trigger = [*USER, {"type": "compaction_trigger"}]
    whole = client.responses.create(model="gpt-5.6", input=trigger)  # type: ignore[arg-type]
    assert [type(i) for i in whole.output] == [ResponseCompactionItem]
    events = list(
        client.responses.create(model="gpt-5.6", input=trigger, stream=True)  # type: ignore[arg-type]
    )
    assert any(isinstance(e, ResponseCompactionCompactingEvent) for e in events)
    done = [e for e in events if e.type == "response.output_item.done"]
    assert isinstance(done[0].item, ResponseCompactionItem)
    assert done[0].item.encrypted_content == fake.compactions[done[0].item.id]
    # The item goes back first in a later input and is accepted; altered, it is refused.
    item = whole.output[0].to_dict()
    client.responses.create(model="gpt-5.6", input=[item, *USER])  # type: ignore[list-item]
    forged = {**item, "encrypted_content": item["encrypted_content"][:-4] + "AAAA"}
    with pytest.raises(openai.BadRequestError, match="could not be verified"):
        client.responses.create(model="gpt-5.6", input=[forged, *USER])  # type: ignore[list-item]
    with pytest.raises(openai.BadRequestError, match="final input item"):
        client.responses.create(
            model="gpt-5.6",
            input=[{"type": "compaction_trigger"}, *USER],  # type: ignore[list-item]
        )


def test_responses_threshold_compacts_before_the_answer(
    responses: tuple[CompactingResponses, openai.OpenAI],
) -> None:
    fake, client = responses
    fake.push_turns(Turn(text="small"), Turn(text="big"))
    managed = [{"type": "compaction", "compact_threshold": 1000}]
    small = client.responses.create(model="gpt-5.6", input=USER, context_management=managed)  # type: ignore[arg-type]
    assert [i.type for i in small.output] == ["message"]
    big = [{"role": "user", "content": "x" * 8000}]
    answer = client.responses.create(model="gpt-5.6", input=big, context_management=managed)  # type: ignore[arg-type]
    assert [i.type for i in answer.output] == ["compaction", "message"]
    with pytest.raises(openai.BadRequestError, match="context_management"):
        client.responses.create(
            model="gpt-5.6",
            input=USER,  # type: ignore[arg-type]
            context_management=[{"type": "truncate"}],
        )


def test_messages_on_demand_compaction_as_the_sdk_reads_it(
    messages: tuple[CompactingMessages, anthropic.Anthropic],
) -> None:
    fake, client = messages
    args = {"model": "claude-fable-5-1", "max_tokens": 1024, "messages": USER}
    reply = client.beta.messages.create(
        **args, compaction={"type": "summarize"}, betas=[SUMMARIZE_BETA]
    )
    assert reply.stop_reason == "compaction"
    assert [type(b) for b in reply.content] == [BetaCompactionBlock]
    with client.beta.messages.stream(
        **args, compaction={"type": "summarize"}, betas=[SUMMARIZE_BETA]
    ) as stream:
        streamed = stream.get_final_message()
    block = streamed.content[0]
    assert isinstance(block, BetaCompactionBlock) and block.signature and block.content
    assert streamed.stop_reason == "compaction"
    # Sent back first, as signed, the conversation goes on from it; altered, it is refused.
    later = [{"role": "assistant", "content": [block.to_dict()]}, *USER]
    fake.push_turns(MessagesTurn.text("Going on."))
    assert client.beta.messages.create(**{**args, "messages": later}).content[0].type == "text"
    forged = [{"role": "assistant", "content": [{**block.to_dict(), "content": "other"}]}, *USER]
    with pytest.raises(anthropic.BadRequestError, match="compaction"):
        client.beta.messages.create(**{**args, "messages": forged})
    with pytest.raises(anthropic.BadRequestError, match="Extra inputs"):
        client.beta.messages.create(**args, compaction={"type": "summarize"})


def test_messages_context_edits_report_what_applied(
    messages: tuple[CompactingMessages, anthropic.Anthropic],
) -> None:
    fake, client = messages
    managed = {
        "edits": [
            {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 10}},
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50}},
        ]
    }
    big = [{"role": "user", "content": "x" * 4000}]
    fake.push_turns(MessagesTurn.text("Answer."))
    reply = client.beta.messages.create(
        model="claude-fable-5-1",
        max_tokens=1024,
        messages=big,  # type: ignore[arg-type]
        context_management=managed,  # type: ignore[arg-type]
        betas=[CONTEXT_BETA, COMPACT_BETA],
    )
    assert [b.type for b in reply.content] == ["compaction", "text"]
    assert isinstance(reply.context_management, BetaContextManagementResponse)
    assert reply.context_management.applied_edits[0].type == "clear_tool_uses_20250919"
    assert [i.type for i in reply.usage.iterations or []] == ["compaction", "message"]
    with pytest.raises(anthropic.BadRequestError, match="Extra inputs"):
        client.beta.messages.create(
            model="claude-fable-5-1",
            max_tokens=1024,
            messages=big,  # type: ignore[arg-type]
            context_management=managed,  # type: ignore[arg-type]
            betas=[CONTEXT_BETA],
        )
