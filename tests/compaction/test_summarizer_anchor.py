"""Anchored summaries: a session's next summary merges the new span into the previous one."""

from __future__ import annotations

from typing import Any

from proxy.compact import SUMMARY_PROMPT, format_compacted_summary
from proxy.compaction.summarizer import (
    ANCHOR_NOTE,
    SUMMARY_REQUEST,
    ContextLengthExceeded,
    Summarizer,
    holds_summary,
)


class Upstream:
    """Records the summary requests; refuses the first `refuse` of them for length."""

    def __init__(self, refuse: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refuse = refuse

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        if len(self.bodies) <= self.refuse:
            raise ContextLengthExceeded("too long")
        text = f"summary {len(self.bodies)}"
        return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def span(n: int = 4) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"m{i} " * 60} for i in range(n)]


async def test_a_first_summary_is_not_anchored() -> None:
    up = Upstream()
    assert await Summarizer(up, "m")(span()) == "summary 1"
    assert up.bodies[0]["messages"][-1] == {"role": "user", "content": SUMMARY_REQUEST}


async def test_the_next_summary_rewrites_the_previous_one_with_the_new_span() -> None:
    up = Upstream()
    earlier = {"role": "system", "content": format_compacted_summary("## overview\nold work")}
    await Summarizer(up, "m")([earlier, *span()])
    messages = up.bodies[0]["messages"]
    assert messages[0]["content"] == SUMMARY_PROMPT and messages[1] == earlier
    assert messages[-1]["content"] == f"{SUMMARY_REQUEST}\n\n{ANCHOR_NOTE}"


async def test_a_plain_system_prompt_is_no_anchor() -> None:
    up = Upstream()
    await Summarizer(up, "m")([{"role": "system", "content": "You are terse."}, *span()])
    assert up.bodies[0]["messages"][-1]["content"] == SUMMARY_REQUEST


async def test_pieces_of_a_split_span_are_anchored_on_the_piece_before() -> None:
    up = Upstream(refuse=1)
    assert await Summarizer(up, "m")(span(6)) == "summary 3"
    first, second = up.bodies[1]["messages"], up.bodies[2]["messages"]
    assert first[-1]["content"] == SUMMARY_REQUEST  # the span's first half: nothing before it
    assert holds_summary(second[1]) and "summary 2" in second[1]["content"]
    assert second[-1]["content"].endswith(ANCHOR_NOTE)


async def test_a_shared_prefix_request_is_anchored_when_the_prefix_holds_a_summary() -> None:
    up = Upstream()
    prefix = [{"role": "system", "content": format_compacted_summary("old") + "\n\nclient"}]
    await Summarizer(up, "m", prefix=[*prefix, *span()])([])
    last = up.bodies[0]["messages"][-1]["content"]
    assert last.startswith(SUMMARY_PROMPT) and ANCHOR_NOTE in last
    up2 = Upstream()
    await Summarizer(up2, "m", prefix=span())([])
    assert ANCHOR_NOTE not in up2.bodies[0]["messages"][-1]["content"]
