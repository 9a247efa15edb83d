"""`proxy.wire.messages.binding`: which thinking blocks may go back, judged by the prefix they
were written under, and the same judgement the fake Messages API makes (tests/fake_binding)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.wire.messages.binding import (
    OMITTED,
    PrefixChain,
    bind,
    block_key,
    checks_prefixes,
    remember,
    reply_bindings,
)
from tests.support.fake_binding import check_prefixes
from tests.support.fake_binding import reply_digests as fake_digests

SYSTEM = [{"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read", "input_schema": {"type": "object"}}]


def thinking(n: int) -> dict[str, Any]:
    return {"type": "thinking", "thinking": f"step {n}", "signature": f"sig-{n}"}


class Session:
    """A model that writes one thinking block and a call each turn, as the proxy and the
    fake both record it: `bindings` the proxy's, `bound` the fake's."""

    def __init__(self) -> None:
        self.bindings: dict[str, str] = {}
        self.bound: dict[str, str] = {}
        self.body: dict[str, Any] = {
            "model": "claude-opus-5-5",
            "system": SYSTEM,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "Read the files."}],
        }

    def turn(self, n: int, sent: dict[str, Any] | None = None) -> None:
        """The model answers `sent` (what went upstream; the client's body by default), and
        the client appends the answer and the call's result to its own body."""
        sent = sent or self.body
        content = [thinking(n), {"type": "tool_use", "id": f"t{n}", "name": "read", "input": {}}]
        chain = bind(sent, {}, trust_unknown=True).tail if sent is self.body else None
        tail = chain or bind(sent, self.bindings, trust_unknown=False).tail
        remember(self.bindings, reply_bindings(tail, content))
        for block, digest in zip(content, fake_digests(sent, content), strict=True):
            if block["type"] == "thinking":
                self.bound[block["signature"]] = digest
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"file {n}"}
        self.body["messages"] += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": [result]},
        ]

    def valid_for_the_fake(self, body: dict[str, Any]) -> bool:
        return check_prefixes(body, self.bound, drop=False).refusal is None


def placeholder(body: dict[str, Any], index: int) -> dict[str, Any]:
    """`body` with the tool result of message `index` reclaimed, as level 1 does."""
    changed = copy.deepcopy(body)
    block = changed["messages"][index]["content"][0]
    block["content"] = "[Compacted, ID: x. If this content is still needed ...]"
    return changed


def kept_thinking(body: dict[str, Any]) -> list[str]:
    return [
        b["thinking"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    ]


def test_an_unchanged_history_goes_as_it_came() -> None:
    s = Session()
    for n in range(3):
        s.turn(n)
    bound = bind(s.body, s.bindings, trust_unknown=False)
    assert bound.removed == 0 and bound.body is s.body
    assert s.valid_for_the_fake(s.body)
    # the breakpoints moved: the same prefix
    moved = copy.deepcopy(s.body)
    moved["system"] = [{"type": "text", "text": "Be careful."}]
    moved["messages"][-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert bind(moved, s.bindings, trust_unknown=False).removed == 0


def test_a_placeholder_removes_every_block_after_it_and_keeps_those_before() -> None:
    s = Session()
    for n in range(4):
        s.turn(n)
    changed = placeholder(s.body, 4)  # the result of call 1; thinking 2 and 3 follow it
    assert not s.valid_for_the_fake(changed)
    bound = bind(changed, s.bindings, trust_unknown=False)
    assert bound.removed == 2
    assert kept_thinking(bound.body) == ["step 0", "step 1"]
    assert s.valid_for_the_fake(bound.body)
    # the kept blocks are the client's own objects, byte for byte
    assert bound.body["messages"][1] is changed["messages"][1]


def test_thinking_written_after_the_compaction_stays_valid_while_it_stands() -> None:
    s = Session()
    for n in range(3):
        s.turn(n)
    compacted = placeholder(s.body, 2)
    first = bind(compacted, s.bindings, trust_unknown=False)
    s.turn(3, sent=first.body)
    for n in range(4, 6):
        # the next requests repeat the compaction and the removal exactly: append-only
        again = bind(placeholder(s.body, 2), s.bindings, trust_unknown=False)
        assert again.body["messages"][: len(first.body["messages"])] == first.body["messages"]
        assert s.valid_for_the_fake(again.body)
        s.turn(n, sent=again.body)
    final = bind(placeholder(s.body, 2), s.bindings, trust_unknown=False)
    assert kept_thinking(final.body) == ["step 0", "step 3", "step 4", "step 5"]
    assert s.valid_for_the_fake(final.body)


def test_a_summary_in_system_or_a_new_tool_removes_them_all() -> None:
    s = Session()
    for n in range(2):
        s.turn(n)
    summary = {**s.body, "system": [*SYSTEM, {"type": "text", "text": "Summary."}]}
    tool = {**s.body, "tools": [*TOOLS, {"name": "extract", "input_schema": {"type": "object"}}]}
    for changed in (summary, tool):
        bound = bind(changed, s.bindings, trust_unknown=False)
        assert bound.removed == 2 and kept_thinking(bound.body) == []
        assert s.valid_for_the_fake(bound.body)


def test_an_assistant_message_left_empty_gets_a_text_block() -> None:
    s = Session()
    s.turn(0)
    alone = {"role": "assistant", "content": [thinking(9)]}
    body = {**s.body, "messages": [*s.body["messages"], alone, {"role": "user", "content": "Go"}]}
    bound = bind(body, s.bindings, trust_unknown=False)  # "sig-9" was never bound
    assert bound.body["messages"][-2]["content"] == [{"type": "text", "text": OMITTED}]
    last = {**s.body, "messages": [*s.body["messages"], alone]}  # a final (prefill) message
    assert bind(last, s.bindings, trust_unknown=False).body["messages"][-1]["content"] == []


def test_unknown_blocks_are_kept_only_in_the_clients_own_request() -> None:
    s = Session()
    s.turn(0)
    s.turn(1)
    assert bind(s.body, {}, trust_unknown=True).removed == 0
    assert bind(s.body, {}, trust_unknown=False).removed == 2
    # after a removal, an unknown block cannot be trusted either
    partial = {block_key(thinking(0)): "not-its-prefix"}
    assert bind(s.body, partial, trust_unknown=True).removed == 2


def test_an_edit_by_the_client_is_judged_the_same_way() -> None:
    s = Session()
    for n in range(3):
        s.turn(n)
    edited = copy.deepcopy(s.body)
    edited["messages"][0]["content"] = "Read the files, slowly."
    assert kept_thinking(bind(edited, s.bindings, trust_unknown=False).body) == []
    branch = copy.deepcopy(s.body)
    branch["messages"] = branch["messages"][:3]  # back to turn 0, another way on
    assert bind(branch, s.bindings, trust_unknown=False).removed == 0


def test_redacted_thinking_is_bound_by_its_data() -> None:
    tail = PrefixChain.head({"system": "S", "tools": []})
    redacted = {"type": "redacted_thinking", "data": "RWFC"}
    found = reply_bindings(tail, [redacted, {"type": "text", "text": "ok"}])
    assert list(found) == [block_key(redacted)]


@pytest.mark.parametrize(
    ("model", "checks"),
    [
        ("claude-opus-5-5", True),
        ("claude-fable-5-1", True),
        ("claude-fable-5-2-20261001", True),
        ("claude-mythos-5-1", True),
        ("claude-haiku-5-5", True),
        ("claude-sonnet-6", True),  # a later model, not yet listed anywhere
        ("claude-opus-6-1-20270101", True),
        ("us.anthropic.claude-sonnet-5-5-v1:0", True),  # Bedrock's inference profile id
        ("claude-opus-5-20260301", False),  # a date is not a minor version
        ("claude-fable-5", False),
        ("claude-opus-5-0", False),
        ("claude-opus-4-8", False),
        ("claude-3-7-sonnet-latest", False),
        ("gpt-5.6", False),
        (None, False),
    ],
)
def test_which_models_check(model: object, checks: bool) -> None:
    assert checks_prefixes(model) is checks


def test_bindings_are_bounded() -> None:
    bindings: dict[str, str] = {}
    remember(bindings, {str(n): "d" for n in range(5000)})
    assert len(bindings) == 4096 and "0" not in bindings and "4999" in bindings


def same_bound(a: Any, b: Any) -> bool:
    return (a.body, a.removed, a.tail.digest()) == (b.body, b.removed, b.tail.digest())


def test_going_on_from_the_last_walk_judges_as_a_whole_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request that resends the last one's messages hashes only the new ones, and gets
    what walking it whole gives, whatever changed meanwhile: bindings forgotten, trust,
    an edit, a placeholder (which removes blocks: no walk is kept from it)."""
    hashed: list[object] = []
    original = PrefixChain.message
    monkeypatch.setattr(PrefixChain, "message", lambda c, r: hashed.append(r) or original(c, r))
    s = Session()
    walked = None
    for n in range(6):
        s.turn(n)
        whole = bind(s.body, s.bindings, trust_unknown=False)
        hashed.clear()
        resumed = bind(s.body, s.bindings, trust_unknown=False, walked=walked)
        assert same_bound(resumed, whole)
        assert len(hashed) == (2 if n else len(s.body["messages"]))  # only the new turn
        trusting = bind(s.body, s.bindings, trust_unknown=True, walked=resumed.walked)
        assert same_bound(trusting, bind(s.body, s.bindings, trust_unknown=True))
        walked = resumed.walked
        assert walked is not None and walked.messages == s.body["messages"]
    forgotten = dict(s.bindings)
    forgotten.pop(block_key(thinking(2)))  # a block the session no longer knows
    for trust in (False, True):
        whole = bind(s.body, forgotten, trust_unknown=trust)
        assert same_bound(bind(s.body, forgotten, trust_unknown=trust, walked=walked), whole)
    assert bind(s.body, forgotten, trust_unknown=False, walked=walked).removed == 4
    changed = placeholder(s.body, 4)  # new objects from the first message on
    resumed = bind(changed, s.bindings, trust_unknown=False, walked=walked)
    assert same_bound(resumed, bind(changed, s.bindings, trust_unknown=False))
    assert resumed.removed and resumed.walked is None
    edited = {
        **s.body,
        "messages": [*s.body["messages"][:5], *copy.deepcopy(s.body["messages"][5:])],
    }
    edited["messages"][5]["content"][0]["thinking"] = "edited"
    resumed = bind(edited, s.bindings, trust_unknown=False, walked=walked)
    assert same_bound(resumed, bind(edited, s.bindings, trust_unknown=False))
    other = {**s.body, "system": [{"type": "text", "text": "Another system."}]}
    resumed = bind(other, s.bindings, trust_unknown=False, walked=walked)
    assert same_bound(resumed, bind(other, s.bindings, trust_unknown=False))
