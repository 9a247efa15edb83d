"""The benchmark's future-reference coverage rule (`tests/bench/coverage.py`, issue 35)."""

from __future__ import annotations

import json
from typing import Any

from proxy.session.lookback import Item
from tests.bench.coverage import (
    Tally,
    action_literals,
    classify,
    compacted,
    identifier_words,
    search,
    shown_text,
    unsent_items,
)


def call(**arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps(arguments)},
            }
        ],
    }


def literals(action: dict[str, Any], history: str) -> set[str]:
    return action_literals(action, history, identifier_words(history))


def test_paths_dotted_names_underscores_digits_and_camel_case_are_literals() -> None:
    history = (
        "src/app/views.py ActionSystem.AttachPerformer parse_args build2 OwnerClientId "
        "deck.OwnerClientId /testbed/django/db"
    )
    action = call(
        command="grep -n ActionSystem.AttachPerformer src/app/views.py && sed -n 1,20p "
        "/testbed/django/db/ && python -c 'parse_args(build2)' # OwnerClientId deck.OwnerClientId."
    )
    assert literals(action, history) == {
        "ActionSystem.AttachPerformer",
        "src/app/views.py",
        "/testbed/django/db",
        "parse_args",
        "build2",
        "OwnerClientId",
        "deck.OwnerClientId",
    }


def test_plain_words_short_tokens_numbers_and_flags_are_not() -> None:
    history = "please install requirements then --verbose 1234567 views.py a_b"
    action = call(command="please install requirements --verbose 1234567 a_b views.py")
    assert literals(action, history) == {"views.py"}


def test_a_plain_word_the_history_calls_or_reads_as_an_attribute_is_an_identifier() -> None:
    history = "def render(self):\n    return self.compile + other"
    action = call(command="grep -n 'render\\|compile\\|return' x.txt")
    assert literals(action, history) == {"render", "compile"}


def test_only_literals_the_history_holds_count_and_every_argument_is_read() -> None:
    action = call(path="pkg/new_module.py", old_str="old_name", new_str="helper_fn(1)")
    assert literals(action, "we saw old_name and helper_fn before") == {"old_name", "helper_fn"}


def item(n: int, text: str) -> Item:
    return Item(f"msg:{n}", n, "user", text, n)


def test_classify_visible_read_search_unreachable() -> None:
    items = [item(3, "def FrobnicateWidget(x): ...")]

    def find(query: str) -> list[Item]:
        return search(items, query)

    shown = "open src/shown_file.py"
    originals = ["the original: needle_in_result"]
    assert classify("src/shown_file.py", shown, originals, find) == "visible"
    assert classify("needle_in_result", shown, originals, find) == "read"
    assert classify("FrobnicateWidget", shown, originals, find) == "search"
    assert classify("missing_name", shown, originals, find) == "unreachable"


def test_the_proxys_search_is_case_insensitive_newest_first_and_returns_at_most_twenty() -> None:
    # The exact spelling is only in the oldest of 25 items: the search's 20 hits miss it.
    items = [item(n, "MyName" if n == 0 else "myname") for n in range(25)]
    hits = search(items, "MYNAME")
    assert [h.index for h in hits] == list(range(24, 4, -1))
    assert classify("MyName", "", [], lambda q: search(items, q)) == "unreachable"
    assert classify("MyName", "", [], lambda q: search(items[:20], q)) == "search"


def test_unsent_items_are_the_pieces_the_upstream_request_does_not_show() -> None:
    history = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "fix the parser in lib/parse.py"},
        call(command="cat lib/parse.py"),
        {"role": "tool", "tool_call_id": "c1", "content": "def parse_quotes(): pass"},
        {"role": "assistant", "content": "I will edit it"},
    ]
    sent = [
        {"role": "system", "content": "You fix bugs.\nSummary: the user wants lib/parse.py fixed"},
        {"role": "tool", "tool_call_id": "c1", "content": "[Compacted, ID: c1.]"},
        {"role": "assistant", "content": "I will edit it"},
    ]
    items = unsent_items(history, shown_text(sent))
    assert [i.id for i in items] == ["msg:1", "call:c1", "c1"]
    assert [h.id for h in search(items, "PARSE_QUOTES")] == ["c1"]


def test_tally_shares_and_targets() -> None:
    tally = Tally()
    for category in ["visible"] * 7 + ["read", "search", "unreachable"]:
        tally.add(category, "lost_name" if category == "unreachable" else "")
    other = Tally()
    other.add("visible")
    tally.merge(other)
    shares = tally.as_dict()
    assert shares["literals"] == 11
    assert shares["pct"]["visible"] == round(100 * 8 / 11, 2)
    assert shares["pct"]["visible_or_read"] == round(100 * 9 / 11, 2)
    assert shares["pct"]["reachable"] == round(100 * 10 / 11, 2)
    assert shares["ex"] == ["lost_name"]


def test_a_session_counts_from_the_first_request_with_a_placeholder_or_a_summary() -> None:
    from proxy.rules import COMPACTED_SYSTEM_PROMPT, PLACEHOLDER_TEMPLATE

    assert not compacted(shown_text([{"role": "user", "content": "fix lib/parse.py"}]))
    placeholder = PLACEHOLDER_TEMPLATE.format(key="call_1")
    assert compacted(shown_text([{"role": "tool", "tool_call_id": "x", "content": placeholder}]))
    summary = COMPACTED_SYSTEM_PROMPT + "\n<conversation_summary>...</conversation_summary>"
    assert compacted(shown_text([{"role": "system", "content": summary}]))


def test_a_tool_call_whose_arguments_another_wire_reserialised_is_still_sent() -> None:
    history = [call(command="cat lib/parse.py", timeout=30)]
    resent = json.dumps({"command": "cat lib/parse.py", "timeout": 30}, separators=(",", ":"))
    sent = [dict(history[0], tool_calls=[dict(history[0]["tool_calls"][0])])]
    sent[0]["tool_calls"][0]["function"] = {"name": "bash", "arguments": resent}
    assert history[0]["tool_calls"][0]["function"]["arguments"] != resent
    assert unsent_items(history, shown_text(sent)) == []
