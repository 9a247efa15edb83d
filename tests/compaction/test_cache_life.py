"""Cold-cache compaction, the pure part: how long each provider keeps a prompt cache, when a
session's has gone cold, and what that does to the cost-aware strategy's decision."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.compact import CompactionContext
from proxy.compaction.cache_aware import CacheAwareCompactor
from proxy.compaction.cache_life import cache_cold, is_cold, last_request_at, lifetime_for
from proxy.compaction.economics import Economics
from proxy.conversation import Conversation
from proxy.conversation_message import message_chars
from proxy.session.turn_log import TurnLog
from tests.support.core_helpers import add_tool_turn

THRESHOLD = 10_000


@pytest.mark.parametrize(
    ("model", "ttl", "overrides", "expected"),
    [
        ("claude-sonnet-4-6", None, None, 300.0),  # Anthropic's default: 5 minutes
        ("claude-sonnet-4-6", "5m", None, 300.0),
        ("claude-sonnet-4-6", "1h", None, 3600.0),  # cache_control: {"ttl": "1h"}
        ("anthropic/claude-3", None, None, 300.0),
        ("gpt-4o", None, None, 600.0),  # OpenAI's in-memory cache: 5-10 minutes
        ("gpt-5.6", "24h", None, 86400.0),  # prompt_cache_retention: "24h"
        ("local-llama", None, None, 600.0),
        ("gpt-4o", None, {"gpt-4o": 120}, 120.0),
        ("claude-x", None, {"claude": 60, "claude-x": 90}, 90.0),  # longest prefix wins
        ("claude-x", "1h", {"claude": 60}, 3600.0),  # what the request asks for wins
    ],
)
def test_lifetime_by_provider_model_and_request(
    model: str, ttl: str | None, overrides: Any, expected: float
) -> None:
    assert lifetime_for(model, ttl, overrides) == expected


def test_cold_once_the_pause_exceeds_the_lifetime() -> None:
    log = TurnLog.of([{"at": 1000.0, "total_tokens": 5}, {"at": 2000.0, "total_tokens": 6}])
    assert last_request_at(log) == 2000.0
    assert not cache_cold(log, 2000.0 + 299, "claude-3")
    assert cache_cold(log, 2000.0 + 301, "claude-3")
    assert not cache_cold(log, 2000.0 + 301, "claude-3", "1h")
    assert not cache_cold(TurnLog(), 1e12, "claude-3")  # no earlier request: nothing cached
    assert not is_cold(None, 1.0) and is_cold(2.0, 1.0) and not is_cold(1.0, 1.0)


def test_a_damaged_or_timeless_last_record_falls_back_to_the_one_before() -> None:
    log = TurnLog("\n".join(['{"at": 50.0}', '{"total_tokens": 1}', "not json"]))
    assert last_request_at(log) == 50.0
    assert last_request_at(TurnLog('{"at": true}')) is None


def test_a_cold_cache_makes_the_rewrite_free_and_the_summary_read_uncached() -> None:
    warm = Economics(cache_factor=0.1, hit_ratio=1.0, write_factor=1.25)
    cold = Economics(cache_factor=0.1, hit_ratio=1.0, write_factor=1.25, cache_cold=True)
    assert warm.rewrite_cost(1000) == pytest.approx(1150)
    assert cold.rewrite_cost(1000) == 0.0
    assert warm.price_now == pytest.approx(0.1) and cold.price_now == pytest.approx(1.25)
    # The turns after it are warm again: what a compaction saves on them is unchanged.
    assert cold.saving_per_turn(1000) == warm.saving_per_turn(1000)


def session(turns: int, size: int = 2000) -> Conversation:
    conv = Conversation()
    conv.set_system_message_content("You are an agent. " + "Follow the house rules. " * 400)
    conv.add_user_message("Fix the bug.")
    for i in range(turns):
        add_tool_turn(conv, f"c{i}", f"{i}:" + "x" * size)
    conv.total_tokens = sum(message_chars(m.completion_param()) for m in conv.messages) // 4
    return conv


def decide(conv: Conversation, econ: Economics) -> tuple[bool, str]:
    agent = CompactionContext(conv, lambda _m: "## overview\nsummary", THRESHOLD, econ)
    compactor = CacheAwareCompactor(patience=1.0)  # waiting for break-even in full
    would = compactor.would_compact(agent)
    report = asyncio.run(compactor.auto_compact(agent))
    return would, report.level


def test_a_session_waiting_for_break_even_compacts_when_its_cache_went_cold() -> None:
    def econ(cold: bool) -> Economics:
        return Economics(
            cache_factor=0.1, hit_ratio=0.95, turns=20, rewrites_all=True, cache_cold=cold
        )

    probe = session(18)
    assert probe.total_tokens is not None and probe.total_tokens > THRESHOLD
    assert decide(session(18), econ(False)) == (False, "none")  # warm: the cache is cheaper
    would, level = decide(session(18), econ(True))
    assert would and level in ("toolcall", "summary")
    # Under the threshold nothing happens, cold or not: cold only brings a compaction forward
    # that the strategy was already weighing.
    small = session(2)
    assert small.total_tokens is not None and small.total_tokens < THRESHOLD
    assert decide(small, econ(True)) == (False, "none")


def test_each_wire_reads_the_lifetime_the_request_asks_for() -> None:
    from proxy.wire.chat.adapter import ChatWire
    from proxy.wire.messages.adapter import MessagesWire
    from proxy.wire.responses.adapter import ResponsesWire

    chat, responses, messages = ChatWire(), ResponsesWire(), MessagesWire()
    assert chat.cache_ttl({"prompt_cache_retention": "24h"}) == "24h"
    assert chat.cache_ttl({"prompt_cache_retention": "in_memory"}) is None
    assert responses.cache_ttl({"prompt_cache_retention": "24h"}) == "24h"
    assert responses.cache_ttl({}) is None
    mark = {"type": "ephemeral", "ttl": "1h"}
    block = {"type": "text", "text": "hi", "cache_control": mark}
    marked = {"messages": [{"role": "user", "content": [block]}]}
    assert messages.cache_ttl(marked) == "1h"
    assert lifetime_for("claude-x", messages.cache_ttl(marked)) == 3600.0
    assert lifetime_for("gpt-5.6", chat.cache_ttl({"prompt_cache_retention": "24h"})) == 86400.0
