"""A provider's compaction in the history is where the proxy's own compaction may begin
(`proxy.session.history.provider_floor`, `proxy.session.rebuild.rebuild`). Pure, no server."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.session.history import X_PROVIDER_COMPACTION, provider_floor
from proxy.session.rebuild import rebuild, record_turn
from proxy.session.state import SessionState

COMPACTED = {"role": "assistant", "content": None, X_PROVIDER_COMPACTION: True}


def call(n: int) -> dict[str, Any]:
    function = {"name": "read", "arguments": "{}"}
    return {
        "role": "assistant",
        "tool_calls": [{"id": f"c{n}", "type": "function", "function": function}],
    }


def result(n: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{n}", "content": f"file {n} " * 200}


def history(turns: int, *, compacted_at: int | None = None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Read."},
    ]
    for n in range(turns):
        if n == compacted_at:
            messages.append({**COMPACTED, "tool_calls": call(n)["tool_calls"]})
        else:
            messages.append(call(n))
        messages.append(result(n))
    return messages


@pytest.mark.parametrize(
    ("marks", "expected"),
    [
        ([], (-1, 0)),
        ([1], (1, 2)),  # just after it
        ([1, 3], (3, 4)),  # the last one counts
    ],
)
def test_the_floor_follows_the_last_mark(marks: list[int], expected: tuple[int, int]) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "x"} for _ in range(6)]
    for i in marks:
        messages[i] = {**messages[i], X_PROVIDER_COMPACTION: True}
    assert provider_floor(messages) == expected


def test_the_floor_passes_the_results_of_the_calls_made_beside_the_compaction() -> None:
    messages = history(4, compacted_at=1)
    mark, floor = provider_floor(messages)
    assert (mark, floor) == (4, 6)
    assert messages[floor - 1]["role"] == "tool" and messages[floor]["role"] == "assistant"


def test_a_known_mark_spares_the_scan_of_the_prefix_it_was_found_in() -> None:
    messages = history(6)
    # Told the first 8 messages hold their last mark at 3, only the rest is looked at.
    assert provider_floor(messages, known=3, start=8) == (3, 4)
    # A mark past what the caller vouches for is not trusted: everything is looked at.
    assert provider_floor(messages, known=9, start=8) == (-1, 0)


def test_rebuild_keeps_everything_up_to_the_provider_compaction_out_of_reach() -> None:
    messages = history(10, compacted_at=4)
    rb = rebuild(messages, None)
    assert (rb.floor, rb.state.provider_mark) == (12, 10)
    origins = [rb.origin[id(m)] for m in rb.conversation.messages if id(m) in rb.origin]
    assert min(origins) == 12, "nothing before the floor is in the compactable conversation"
    conv_keys = rb.conversation.compact_toolcall(keep_max=1)
    assert conv_keys.reclaimed_count > 0
    sent = rb.upstream_messages()
    assert sent[:12] == messages[:12], "the provider's compaction and what precedes it, as sent"
    assert all("[Compacted" not in str(m.get("content")) for m in sent[:12])


def test_a_summary_from_before_the_provider_compaction_no_longer_applies() -> None:
    before = history(6)
    state = SessionState(summary="old summary", cut=6)
    rb = rebuild(before, state)
    state = record_turn(rb, total_tokens=1000)
    state.cut_hash = rb.chain.prefix(6)
    later = [*before, {**COMPACTED}, {"role": "user", "content": "Go on."}]
    rb = rebuild(later, state)
    assert rb.state.summary is None and rb.floor == len(before) + 1
    assert rb.upstream_messages() == later
