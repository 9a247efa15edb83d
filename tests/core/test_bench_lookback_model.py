"""The looking-back replay model's choice of what to read (tests/bench/lookback_model.py), on
answers the proxy's own search writes."""

from __future__ import annotations

from proxy.session.lookback import Item, search
from tests.bench.lookback_model import hit_holding, next_step


def items() -> list[Item]:
    return [
        Item("call_a", 1, "read_file", "def load(path):\n    return open(path).read()", 2),
        Item("call_b", 2, "read_file", "def ActionSystem.AttachPerformer(self, performer):", 4),
        Item("call_c", 3, "bash", "grep found ActionSystem in 3 files", 6),
    ]


def test_a_reader_opens_the_hit_whose_preview_shows_the_literal() -> None:
    answer = search("AttachPerformer", items()).text
    assert hit_holding(answer, "AttachPerformer") == "call_b"
    # Both hits name ActionSystem: the newest comes first in the answer, and is the one read.
    answer = search("ActionSystem", items()).text
    assert hit_holding(answer, "ActionSystem") == "call_c"
    # Only the older hit's preview shows the method: that one, not the first line's.
    assert hit_holding(answer, "AttachPerformer") == "call_b"


def test_no_hit_holds_a_literal_the_answer_does_not_show() -> None:
    answer = search("ActionSystem", items()).text
    assert hit_holding(answer, "deck.OwnerClientId") is None
    assert hit_holding(search("nowhere", items()).text, "nowhere") is None


def test_after_a_search_that_did_not_show_it_the_model_reads_the_newest_hit() -> None:
    answer = search("ActionSystem", items()).text
    step = next_step({"literal": "Performer.Attach", "args": {"query": "ActionSystem"}}, answer)
    assert step == {
        "literal": "Performer.Attach",
        "args": {"toolcall_id": "call_c"},
        "hits": ["call_b"],
    }
