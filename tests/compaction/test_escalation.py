"""The escalation ladder after a context-length refusal, and what a refusal says is missing."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compact import CompactionContext
from proxy.compaction.escalation import (
    ForcedSummary,
    ForcedToolcall,
    calibrated,
    ladder,
)
from proxy.conversation import Conversation
from proxy.wire.refusal import missing_tokens


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        (
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "your messages resulted in 9000 tokens. Please reduce the length.",
                    "code": "context_length_exceeded",
                }
            },
            808,
        ),
        (
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
            10000,
        ),
        ({"error": {"message": "Your input exceeds the context window of this model."}}, None),
        (None, None),
        ("not json", None),
    ],
)
def test_missing_tokens_reads_each_providers_refusal(body: Any, missing: int | None) -> None:
    assert missing_tokens(body) == missing


def test_the_ladder_goes_from_level_1_to_ever_smaller_summaries() -> None:
    steps = ladder(12, 16, 2)
    assert steps == [
        ForcedToolcall(12),
        ForcedSummary(12, 16),
        ForcedSummary(6, 8),
        ForcedSummary(3, 4),
    ]
    assert ladder(1, 2, 3)[-1] == ForcedSummary(1, 2)  # never below the last exchange


def test_calibrated_scales_an_estimate_by_the_sessions_ratio() -> None:
    assert calibrated(1000, None) == 1000
    assert calibrated(1000, 1.5) == 1500


def _conversation(results: int) -> Conversation:
    conv = Conversation()
    conv.set_system_message_content("system")
    for i in range(results):
        conv.add_user_message(f"read {i}")
        call = {"id": f"c{i}", "type": "function", "function": {"name": "r", "arguments": "{}"}}
        conv.add_agent_message({"role": "assistant", "content": None, "tool_calls": [call]})
        conv.add_tool_result(f"c{i}", "x" * 2000)
    conv.total_tokens = 999_999
    return conv


async def test_forced_steps_act_whatever_the_estimate_says() -> None:
    conv = _conversation(6)

    async def summarize(messages: list[dict[str, Any]]) -> str:
        return "the summary"

    agent = CompactionContext(conversation=conv, summarize=summarize, token_threshold=10**9)
    report = await ForcedToolcall(2).auto_compact(agent)
    assert report.level == "toolcall" and len(conv.reclaimed_keys()) == 4
    assert conv.total_tokens is None  # the forced size measured nothing
    report = await ForcedSummary(2, 4).auto_compact(agent)
    assert report.level == "summary"
    assert conv.system_prompt is not None and conv.system_prompt.is_compressed
