"""proxy.turn.body_reuse: a body parsed on from the session's last request is the body a whole parse
gives, with the same blocker verdict and the same bytes as written, or the same error."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.errors import InvalidRequest
from proxy.session.json_limits import compaction_blocker
from proxy.turn.body_reuse import BodyReuse
from proxy.wire.chat.adapter import ChatWire
from proxy.wire.messages.adapter import MessagesWire
from proxy.wire.responses.adapter import ResponsesWire

WIRES = {"chat": ChatWire(), "responses": ResponsesWire(), "messages": MessagesWire()}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),  # past orjson's range too: the "wide_int" blocker
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=12),  # escapes, non-ASCII, "]," and quotes
    st.sampled_from(["]", ",", '"],"x":[', "\\", "\u2028"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
items = st.dictionaries(st.sampled_from(["role", "content", "id", "x"]), values, max_size=4)
fields = st.dictionaries(
    st.sampled_from(["model", "system", "tools", "stream", "stream_options", "max_tokens", "n"]),
    values,
    max_size=3,
)


def write(body: dict[str, Any], how: str) -> bytes:
    if how == "orjson":
        try:
            return orjson.dumps(body)
        except TypeError:  # an integer past its range: as other clients write it
            how = "compact"
    if how == "compact":  # as httpx and JSON.stringify write it
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return json.dumps(body).encode()  # spaces, \u escapes: never kept


def corrupt(raw: bytes, how: str) -> bytes:
    """Bytes a client might send that parsing on must not read differently."""
    close = raw.rfind(b"]")
    if how == "trailing_comma" and close > 0:
        return raw[:close] + b"," + raw[close:]
    if how == "duplicate_field":
        return raw[:-1] + b',"messages":[]}' if len(raw) > 2 else raw
    if how == "duplicate_head":
        return raw[:-1] + b',"model":"again"}' if len(raw) > 2 else raw
    if how == "truncated":
        return raw[: len(raw) * 2 // 3]
    if how == "garbage":
        return raw + b"x"
    return raw


@st.composite
def sessions(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    """A wire and a session's request bodies: each the last one with items added, some
    replaced, fields changed, or its bytes written another way or broken."""
    wire = draw(st.sampled_from(sorted(WIRES)))
    field = WIRES[wire].history_field
    head, tail = draw(fields), draw(fields)
    head.pop("stream_options", None)  # chat refuses one that is not an object
    tail.pop("stream_options", None)
    history = draw(st.lists(items, min_size=0, max_size=5))
    raws = []
    for _ in range(draw(st.integers(2, 6))):
        step = draw(
            st.sampled_from(["append"] * 4 + ["same", "replace", "cut", "tail", "tail", "head"])
        )
        if step == "append":
            history = [*history, *draw(st.lists(items, min_size=1, max_size=3))]
        elif step == "replace" and history:
            at = draw(st.integers(0, len(history) - 1))
            history = [*history[:at], draw(items), *history[at + 1 :]]
        elif step == "cut":
            history = history[: draw(st.integers(0, len(history)))]
        elif step == "tail":
            tail = draw(fields)
            tail.pop("stream_options", None)
        elif step == "head":
            head = draw(fields)
            head.pop("stream_options", None)
        body = {**head, field: history, **{k: v for k, v in tail.items() if k not in head}}
        how = draw(st.sampled_from(["orjson"] * 6 + ["compact", "spaces"]))
        broken = draw(
            st.sampled_from(
                ["none"] * 8
                + ["trailing_comma", "duplicate_field", "duplicate_head", "truncated", "garbage"]
            )
        )
        raws.append(corrupt(write(body, how), broken))
    return wire, raws


def whole(wire: str, raw: bytes) -> Any:
    """What the route did before: parse the whole body, then the blocker check."""
    adapter = WIRES[wire]
    try:
        body = adapter.parse(raw)
    except InvalidRequest as exc:
        return ("refused", exc.message)
    blocked, written = compaction_blocker(raw, body, adapter.history_field)
    return described(body, blocked, written)


def described(body: Any, blocked: Any, written: Any) -> Any:
    shown = None
    if written is not None:
        assert written.history is body[written.field] or written.holds(body[written.field])
        shown = (written.field, written.history_json)
    return (
        "parsed",
        orjson.dumps(body) if blocked is None else repr(body),
        list(body),
        blocked,
        shown,
    )


def on(reuse: BodyReuse, wire: str, raw: bytes) -> Any:
    adapter = WIRES[wire]
    try:
        body, blocked, written = reuse.parse(
            "s", raw, adapter.history_field, adapter.parse, adapter.accept
        )
    except InvalidRequest as exc:
        return ("refused", exc.message)
    return described(body, blocked, written)


@settings(max_examples=400, deadline=None)
@given(sessions())
def test_parsing_on_gives_what_a_whole_parse_gives(session: tuple[str, list[bytes]]) -> None:
    wire, raws = session
    reuse = BodyReuse()
    for raw in raws:
        assert on(reuse, wire, raw) == whole(wire, raw)


def chat(n: int, **extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "user" if i % 2 else "assistant", "content": f"m{i} é \n"} for i in range(n)
    ]
    return {"model": "m", "messages": messages, **extra}


def test_an_agents_turns_parse_only_what_they_add() -> None:
    reuse, wire = BodyReuse(), WIRES["chat"]
    first = reuse.parse(
        "s",
        orjson.dumps(chat(10, tools=[{"type": "function"}])),
        "messages",
        wire.parse,
        wire.accept,
    )
    body, blocked, written = reuse.parse(
        "s",
        orjson.dumps(chat(12, tools=[{"type": "function"}])),
        "messages",
        wire.parse,
        wire.accept,
    )
    assert reuse.reused == 1 and blocked is None and written is not None
    assert all(a is b for a, b in zip(body["messages"][:10], first[0]["messages"], strict=True))
    assert body["tools"] is first[0]["tools"]  # the end is the last request's: not parsed again
    assert written.history_json == orjson.dumps(body["messages"])
    # A changed field after the history: parsed, the items still reused.
    body, _, _ = reuse.parse(
        "s", orjson.dumps(chat(13, stream=True)), "messages", wire.parse, wire.accept
    )
    assert reuse.reused == 2 and body["stream"] is True and "tools" not in body
    # Another session, or a body not written as orjson writes it, is parsed whole.
    reuse.parse("t", orjson.dumps(chat(14)), "messages", wire.parse, wire.accept)
    reuse.parse("s", json.dumps(chat(14)).encode(), "messages", wire.parse, wire.accept)
    assert reuse.reused == 2


def test_a_moved_cache_breakpoint_keeps_the_items_before_it() -> None:
    """Claude Code marks its last message for the cache: the next request unmarks it and
    marks a later one, so the history goes on from the message before."""
    reuse, wire = BodyReuse(), WIRES["messages"]
    messages = [{"role": "user", "content": [{"type": "text", "text": f"t{i}"}]} for i in range(6)]
    marked = [
        *messages[:-1],
        {
            **messages[-1],
            "content": [{**messages[-1]["content"][0], "cache_control": {"type": "ephemeral"}}],
        },
    ]
    first, _, _ = reuse.parse(
        "s", orjson.dumps({"model": "c", "messages": marked}), "messages", wire.parse, wire.accept
    )
    later = [*messages, {"role": "assistant", "content": [{"type": "text", "text": "x"}]}]
    body, _, written = reuse.parse(
        "s", orjson.dumps({"model": "c", "messages": later}), "messages", wire.parse, wire.accept
    )
    assert reuse.reused == 1 and body["messages"] == later
    assert all(a is b for a, b in zip(body["messages"][:5], first["messages"][:5], strict=True))
    assert written is not None and written.history_json == orjson.dumps(later)


@pytest.mark.parametrize(("depth", "expected"), [(200, None), (300, "too_deep")])
def test_new_items_nested_deep_are_checked_as_the_whole_body(
    depth: int, expected: str | None
) -> None:
    reuse, wire = BodyReuse(), WIRES["chat"]
    reuse.parse("s", orjson.dumps(chat(3)), "messages", wire.parse, wire.accept)
    deep = b'{"role":"user","content":' + b"[" * depth + b"]" * depth + b"}"
    raw = orjson.dumps(chat(3))[:-2] + b"," + deep + b"]}"
    assert on(reuse, "chat", raw) == whole("chat", raw)
    assert whole("chat", raw)[3] == expected


def test_nesting_past_what_orjson_reads_is_refused_the_same() -> None:
    reuse, wire = BodyReuse(), WIRES["chat"]
    reuse.parse("s", orjson.dumps(chat(3)), "messages", wire.parse, wire.accept)
    raw = orjson.dumps(chat(3))[:-2] + b"," + b"[" * 1030 + b"]" * 1030 + b"]}"
    assert on(reuse, "chat", raw)[0] == "refused"
    assert on(reuse, "chat", raw) == whole("chat", raw)


@pytest.mark.parametrize(
    "later",
    [
        # the history was the last field; now a list field follows it: the new bytes close
        # the history and go on, which must not read as more items
        b'{"model":"m","messages":[{"a":1},{"b":2}],"x":[{"c":3}]}',
        b'{"model":"m","messages":[{"a":1},{"b":2}],"x":[]}',
        # a trailing comma, with the end the last request's or not
        b'{"model":"m","messages":[{"a":1},]}',
        b'{"model":"m","messages":[{"a":1},],"x":1}',
        b'{"model":"m","messages":[{"a":1},{"b":2},],"x":1}',
        # the history as a field again, or a field of the head again
        b'{"model":"m","messages":[{"a":1}],"messages":[]}',
        b'{"model":"m","messages":[{"a":1},{"b":2}],"model":"n"}',
        # another end of the same length, after a `]`
        b'{"model":"m","messages":[{"a":1},{"b":2}],"stream":"abc"}',
    ],
)
def test_bytes_that_only_look_like_more_items(later: bytes) -> None:
    reuse, wire = BodyReuse(), WIRES["chat"]
    first = b'{"model":"m","messages":[{"a":1}]}'
    if b"stream" in later:
        first = b'{"model":"m","messages":[{"a":1}],"stream":false}'
    reuse.parse("s", first, "messages", wire.parse, wire.accept)
    assert on(reuse, "chat", later) == whole("chat", later)


def test_a_subagent_under_the_same_session_id_keeps_the_main_history() -> None:
    """Claude Code's subagents and side calls send their own histories under the session's
    id, between the main conversation's turns: each goes on from its own last request."""
    reuse = BodyReuse()
    main, sub = chat(20), chat(6, model="small")
    sub["messages"][0] = {"role": "system", "content": "You are a subagent."}
    for turn in range(4):
        for body in (main, sub):
            grown = {**body, "messages": [*body["messages"], *chat(2 * turn)["messages"]]}
            raw = orjson.dumps(grown)
            assert on(reuse, "chat", raw) == whole("chat", raw)
    assert reuse.parsed == 8 and reuse.reused == 6  # all but each history's first


def test_bounded_by_sessions_and_bytes() -> None:
    reuse, wire = BodyReuse(max_sessions=3, max_bytes=10_000), WIRES["chat"]
    for i in range(5):
        reuse.parse(f"s{i}", orjson.dumps(chat(5)), "messages", wire.parse, wire.accept)
    assert list(reuse._kept) == ["s2", "s3", "s4"]
    reuse.parse("big", orjson.dumps(chat(400)), "messages", wire.parse, wire.accept)
    assert reuse._bytes <= 10_000 and "big" not in reuse._kept
    reuse.clear()
    assert not reuse._kept and reuse._bytes == 0


def test_a_lull_keeps_the_sessions_that_sent_last() -> None:
    """The idle reclaim shrinks what is kept to the last few sessions: one agent pausing
    between its turns goes on parsing only what it adds; a burst does not stay in memory."""
    reuse, wire = BodyReuse(), WIRES["chat"]
    for i in range(6):
        reuse.parse(f"s{i}", orjson.dumps(chat(5)), "messages", wire.parse, wire.accept)
    reuse.parse("s0", orjson.dumps(chat(6)), "messages", wire.parse, wire.accept)  # s0 again
    assert reuse.stats()["sessions"] == 6 and reuse.reused == 1
    size = reuse.stats()["bytes"]
    reuse.shrink(2)
    assert list(reuse._kept) == ["s5", "s0"]
    stats = reuse.stats()
    assert stats["sessions"] == stats["histories"] == 2
    assert stats["bytes"] == sum(len(k.raw) for lanes in reuse._kept.values() for k in lanes)
    assert 0 < stats["bytes"] < size
    reuse.parse("s0", orjson.dumps(chat(7)), "messages", wire.parse, wire.accept)
    assert reuse.reused == 2  # kept through the lull: parsed on
    reuse.parse("s1", orjson.dumps(chat(6)), "messages", wire.parse, wire.accept)
    assert reuse.reused == 2  # let go: parsed whole
