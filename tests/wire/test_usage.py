"""One usage sum over rounds for the three APIs: the cached-token decision pinned for each."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.wire.usage import CHAT, MESSAGES, RESPONSES, UsageFields, usage_sum


def chat(prompt: int, cached: int | None, reasoning: int = 0) -> dict[str, Any]:
    details = {} if cached is None else {"cached_tokens": cached}
    return {
        "prompt_tokens": prompt,
        "completion_tokens": 5,
        "total_tokens": prompt + 5,
        "prompt_tokens_details": details,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def responses(prompt: int, cached: int | None, reasoning: int = 0) -> dict[str, Any]:
    details = {} if cached is None else {"cached_tokens": cached}
    return {
        "input_tokens": prompt,
        "input_tokens_details": details,
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + 5,
    }


def messages(prompt: int, cached: int | None, reasoning: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": prompt, "output_tokens": 5 + reasoning}
    if cached is not None:
        usage["cache_read_input_tokens"] = cached
    return usage


def cached_of(usage: dict[str, Any] | None) -> Any:
    assert usage is not None
    if "prompt_tokens_details" in usage:
        return usage["prompt_tokens_details"].get("cached_tokens")
    if "input_tokens_details" in usage:
        return usage["input_tokens_details"].get("cached_tokens")
    return usage.get("cache_read_input_tokens")


APIS = [(CHAT, chat), (RESPONSES, responses), (MESSAGES, messages)]
IDS = ["chat", "responses", "messages"]


@pytest.mark.parametrize(("fields", "make"), APIS, ids=IDS)
def test_cached_tokens_are_added_over_rounds_in_every_api(fields: UsageFields, make: Any) -> None:
    """Each round is billed, its cache reads included: a turn's hidden extract rounds and its
    final round report the sum of their cached tokens, in all three APIs alike."""
    summed = usage_sum([make(1000, 800), make(1200, 1000), make(1300, 1200)], fields)
    assert cached_of(summed) == 3000
    assert cached_of(usage_sum([make(1000, 0), make(1200, 1000)], fields)) == 1000


@pytest.mark.parametrize(
    ("fields", "make", "expected"),
    [(CHAT, chat, None), (RESPONSES, responses, 0), (MESSAGES, messages, None)],
    ids=IDS,
)
def test_a_cached_count_no_round_sent(fields: UsageFields, make: Any, expected: Any) -> None:
    """Responses' schema requires `cached_tokens` in its details, so the sum writes 0; Chat and
    Messages make no count up that the upstream never reported."""
    assert cached_of(usage_sum([make(100, None), make(120, None)], fields)) == expected
    assert cached_of(usage_sum([make(100, None), make(120, 7)], fields)) == 7


@pytest.mark.parametrize(("fields", "make"), APIS, ids=IDS)
def test_lone_or_missing_usage(fields: UsageFields, make: Any) -> None:
    only = make(10, 2)
    assert usage_sum([None, only, "x"], fields) is only
    assert usage_sum([], fields) is None and usage_sum([None], fields) is None


def test_chat_reasoning_and_other_fields() -> None:
    first, last = chat(10, 1, reasoning=3), chat(20, 2, reasoning=4)
    last["prompt_tokens_details"]["audio_tokens"] = 0
    last["service_tier"] = "default"
    assert usage_sum([first, last], CHAT) == {
        "prompt_tokens": 30,
        "completion_tokens": 10,
        "total_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 3, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 7},
        "service_tier": "default",
    }


def test_a_value_that_is_not_a_count_adds_nothing() -> None:
    odd = {"prompt_tokens": -3, "completion_tokens": "7", "total_tokens": 2.5}
    assert usage_sum([odd, chat(10, None)], CHAT) == {**chat(10, None), "total_tokens": 15}
    assert usage_sum([{"input_tokens": True}, {"input_tokens": 4}], MESSAGES) == {"input_tokens": 4}
