"""Property: any sequence of compactions on any valid agent conversation keeps it valid.

Random conversations (users, assistants with parallel tool calls, tool results of random
sizes, reasoning fields, repeated tool-call ids) go through random reclaims, summaries,
auto-compactions and new turns. After every step the request must be a valid OpenAI
sequence, the last user message must still be there, and every reclaimed original must come
back exactly as it was.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from proxy.compact import AutoCompactor, CompactionContext, placeholder_for
from proxy.conversation import Conversation
from proxy.conversation_message import Message, RawOpenAIMessage
from tests.support.core_helpers import sequence_errors, tool_call

ID_POOL = ["call_a", "call_b", "call_c", "call_d", "call_e", "call_f"]

reasoning_fields = st.sampled_from([None, "reasoning", "reasoning_content"])
step = st.tuples(
    st.lists(st.sampled_from(ID_POOL), min_size=1, max_size=3, unique=True),
    st.lists(st.integers(0, 700), min_size=3, max_size=3),
    reasoning_fields,
    st.booleans(),  # tool results as a list of text parts
)
turn = st.tuples(
    st.text(max_size=30),
    st.booleans(),  # the user message arrives as a raw client dict
    st.lists(step, max_size=4),
    st.one_of(st.none(), reasoning_fields.map(lambda f: f or "")),  # final answer, if any
)
outcomes = st.sampled_from(["ok", "none", "raise", "huge"])
operation = st.one_of(
    st.tuples(st.just("toolcall"), st.integers(0, 6)),
    st.tuples(st.just("summary"), st.integers(0, 10), outcomes),
    st.tuples(
        st.just("auto"),
        st.integers(0, 40_000),
        st.integers(1_000, 20_000),
        st.tuples(st.integers(0, 12), st.integers(0, 16), st.integers(0, 3), st.integers(0, 2)),
        outcomes,
    ),
    st.tuples(st.just("reclaim"), st.integers(0, 20)),
    st.tuples(st.just("turn"), turn),
)


@dataclass
class World:
    """The conversation plus what the test remembers about it."""

    conversation: Conversation = field(default_factory=Conversation)
    originals: dict[str, Any] = field(default_factory=dict)
    last_user: Message | None = None
    serial: int = 0

    def add_turn(self, spec: tuple[str, bool, list[Any], str | None]) -> None:
        text, as_raw, steps, final = spec
        conversation = self.conversation
        if as_raw:
            message: Message = conversation.append(
                RawOpenAIMessage({"role": "user", "content": text})
            )
        else:
            message = conversation.add_user_message(text)
        self.last_user = message
        for ids, sizes, reasoning, as_parts in steps:
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call(i) for i in ids],
            }
            if reasoning:
                assistant[reasoning] = "thinking " * 3
            conversation.add_agent_message(assistant)
            for call_id, size in zip(ids, sizes, strict=False):
                self.serial += 1
                body = f"{call_id}/{self.serial}:" + "x" * size
                content: Any = [{"type": "text", "text": body}] if as_parts else body
                raw = RawOpenAIMessage(
                    {"role": "tool", "tool_call_id": call_id, "content": content}
                )
                conversation.append(raw)
                assert raw.key is not None
                self.originals[raw.key] = content
        if final is not None:
            answer = {"role": "assistant", "content": "done"}
            if final:
                answer[final] = "because"
            conversation.add_agent_message(answer)

    def check(self) -> None:
        conversation = self.conversation
        params = conversation.completion_params()
        assert sequence_errors(params) == [], params
        users = [m for m in conversation.messages if m.role == "user"]
        assert users and users[-1] is self.last_user
        keys = [m.key for m in conversation.messages if isinstance(m, RawOpenAIMessage) and m.key]
        assert len(keys) == len(set(keys))
        for key in conversation.reclaimed_keys():
            assert conversation.compacted_toolcall_result(key) == self.originals[key]
        for message in conversation.messages:
            if isinstance(message, RawOpenAIMessage) and message.key:
                if message.content == placeholder_for(message.key):
                    assert message.key in conversation.reclaimed_keys()
                else:
                    assert message.content == self.originals[message.key]


def summarizer(outcome: str) -> Any:
    def summarize(messages: list[dict[str, Any]]) -> str | None:
        assert sequence_errors(messages) == []
        if outcome == "raise":
            raise RuntimeError("upstream failed")
        return {"ok": "summary", "none": None, "huge": "s" * 50_000}[outcome]

    return summarize


def apply(world: World, op: tuple[Any, ...]) -> None:
    conversation = world.conversation
    kind = op[0]
    if kind == "toolcall":
        reclaimed = conversation.compact_toolcall(keep_max=op[1]).reclaimed_count
        event(f"toolcall reclaimed any: {reclaimed > 0}")
    elif kind == "summary":
        result = conversation.compact(summarizer(op[2]), keep_recent=op[1])
        event(f"summary: {result.status.value}, moved user: {result.moved_user}")
    elif kind == "auto":
        _, tokens, threshold, (tool_keep, summary_keep, rounds, retries), outcome = op
        conversation.total_tokens = tokens
        compactor = AutoCompactor(tool_keep, summary_keep, rounds, retries)
        agent = CompactionContext(conversation, summarizer(outcome), threshold)
        report = asyncio.run(compactor.auto_compact(agent))
        event(f"auto: {report.level}, {len(report.summary_results)} summaries")
    elif kind == "reclaim":
        keys = [m.key for m in conversation.messages if isinstance(m, RawOpenAIMessage) and m.key]
        conversation.reclaim(keys[op[1] :: 3])
    else:
        world.add_turn(op[1])


@settings(max_examples=150, deadline=None)
@given(first=turn, turns=st.lists(turn, max_size=4), ops=st.lists(operation, max_size=8))
def test_compaction_keeps_conversations_valid(
    first: Any, turns: list[Any], ops: list[tuple[Any, ...]]
) -> None:
    world = World()
    world.conversation.set_persistent_section("client", "You are an agent.")
    for spec in [first, *turns]:
        world.add_turn(spec)
    world.check()
    for op in ops:
        apply(world, op)
        world.check()
    restored = Conversation.loads(world.conversation.dumps())
    assert restored.completion_params() == world.conversation.completion_params()
