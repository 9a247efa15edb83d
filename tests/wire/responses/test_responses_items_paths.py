"""The short paths of the Responses item conversion agree with its general path.

`items_to_messages` takes a short path for the item kinds an agent's history is made of
(reasoning, function calls, their text outputs) and `messages_to_items` one for a tool
message left as it came; `parts_text` reads one part in place. Here each is checked against
the general rule it stands in for, on valid histories and on items of every malformed shape:
the same messages (same keys in the same order, the very items under `x_items`), or the same
refusal in the same words."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.session.history import UnrecognisedHistory
from proxy.wire.responses import from_neutral as rb
from proxy.wire.responses import to_neutral as ri
from proxy.wire.responses.from_neutral import messages_to_items
from proxy.wire.responses.to_neutral import X_ITEMS, items_to_messages, parts_text
from tests.bench.histories import responses_body
from tests.wire.responses.test_responses_items import histories


def general(items: list[Any]) -> list[dict[str, Any]]:
    """`items_to_messages` with every item taken the general way (as before the short paths)."""
    messages: list[dict[str, Any]] = []
    pending: list[Any] = []
    originals: list[Any] | None = None
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[Any] = []
    open_calls: set[str] = set()
    leading = True
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ri._fail(i, "an item that is not an object")
        kind = ri._item_type(item, i)
        role = item.get("role") if kind == "message" else None
        if kind == "message" and role != "assistant":
            leading = leading and role in ri.SYSTEM_ROLES
            messages.append(ri._client_message(item, i, leading))
            originals, open_calls = None, set()
            continue
        leading = False
        link = ri._output_link(item, kind, i)
        if link is not None:
            if link not in open_calls:
                raise ri._fail(i, f"an output for call {link!r}, which no call just before made")
            content = ri.output_content(item)
            messages.append(
                {"role": "tool", "tool_call_id": link, "content": content, X_ITEMS: [item]}
            )
            originals = None
            continue
        if originals is None:
            originals, texts, reasoning, calls, open_calls = [], [], [], [], set()
            message = {"role": "assistant", "content": None, X_ITEMS: originals}
            messages.append(message)
            pending.append((message, texts, reasoning, calls))
        originals.append(item)
        ri._add(item, kind, i, texts, reasoning, calls, open_calls)
    ri._complete(pending)
    return messages


def general_parts_text(content: Any) -> str:
    parts = content if isinstance(content, list) else []
    found = [p.get("text", p.get("refusal")) for p in parts if isinstance(p, dict)]
    return (
        content if isinstance(content, str) else "\n".join(t for t in found if isinstance(t, str))
    )


def outcome(convert: Any, items: Any) -> Any:
    """What a conversion gives: its messages as bytes with their keys' order, the ids of
    their original items and whether a content is an original's own value (not a copy), or
    its refusal."""
    try:
        messages = convert(items)
    except (UnrecognisedHistory, TypeError) as exc:
        return type(exc), str(exc)
    shape = [
        (
            list(m),
            [id(o) for o in m[X_ITEMS]],
            any(m["content"] is v for o in m[X_ITEMS] for v in o.values()),
        )
        for m in messages
    ]
    return orjson.dumps(messages, option=orjson.OPT_NON_STR_KEYS), shape


def check(items: list[Any]) -> None:
    assert outcome(items_to_messages, items) == outcome(general, items)


# -- items of every shape the short paths must notice they cannot take ------------------------


class _Missing:
    """A field left out (a stable repr: it names a parametrized test)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "x", "c1"]))
part = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["input_text", "output_text", "summary_text", "reasoning_text"]),
        "text": st.one_of(st.text(max_size=3), scalars),
        "refusal": st.text(max_size=3),
    },
)
parts = st.one_of(st.lists(st.one_of(part, scalars), max_size=2), st.text(max_size=3), scalars)
junk = st.one_of(
    st.just(MISSING), scalars, st.lists(scalars, max_size=1), st.dictionaries(scalars, parts)
)


def text_parts(kind: str) -> st.SearchStrategy[list[dict[str, str]]]:
    return st.lists(st.builds(lambda t: {"type": kind, "text": t}, st.text(max_size=3)), max_size=2)


@st.composite
def agent_items(draw: st.DrawFn) -> list[Any]:
    """A history of the kinds the short paths take (client messages, reasoning, assistant
    text, function calls and their outputs), one field of an item in three of another shape
    or missing, so that items are refused, or taken the general way, at any point."""

    def item(**fields: Any) -> dict[str, Any]:
        if draw(st.integers(0, 2)) == 0:
            key = draw(st.sampled_from([*fields, "call_id", "content"]))
            fields[key] = draw(parts if key in ("content", "summary") else junk)
        return {
            k: draw(v) if isinstance(v, st.SearchStrategy) else v
            for k, v in fields.items()
            if v is not MISSING
        }

    role = st.sampled_from(["developer", "system", "user", "user"])
    items: list[Any] = []
    for k in range(draw(st.integers(0, 6))):
        step = draw(st.integers(0, 3))
        if step == 0:
            items.append(item(type="message", role=role, content=text_parts("input_text")))
        elif step == 1:
            summary, content = text_parts("summary_text"), text_parts("reasoning_text")
            items.append(item(type="reasoning", summary=summary, content=content, id=f"rs{k}"))
        elif step == 2:
            content = st.one_of(st.text(max_size=3), text_parts("output_text"))
            items.append(item(type="message", role="assistant", content=content))
        else:
            calls = [f"c{k}_{n}" for n in range(draw(st.integers(1, 2)))]
            items.extend(
                item(type="function_call", call_id=c, name="f", arguments="{}") for c in calls
            )
            output = st.one_of(st.text(max_size=3), text_parts("input_text"))
            answered = draw(st.lists(st.sampled_from(calls), unique=True))
            items.extend(
                item(type="function_call_output", call_id=c, output=output) for c in answered
            )
    return items


KINDS = [
    *("message", "reasoning", "function_call", "function_call_output", "custom_tool_call"),
    *("local_shell_call_output", "x_output", "item_reference"),
]
any_item = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(st.sampled_from(KINDS), scalars),
        "role": st.one_of(st.sampled_from(["user", "assistant", "developer", "tool"]), scalars),
        "call_id": st.one_of(st.sampled_from(["c1", "c2"]), scalars, st.lists(scalars, max_size=1)),
        **{key: st.one_of(st.just("c1"), scalars) for key in ("id", "name")},
        **{key: st.one_of(scalars, parts) for key in ("arguments", "input", "output", "result")},
        **{key: parts for key in ("content", "summary")},
    },
)


@settings(max_examples=120, deadline=None)
@given(histories())
def test_valid_histories_convert_as_the_general_path_converts_them(items: list[Any]) -> None:
    check(items)


@settings(max_examples=250, deadline=None)
@given(st.one_of(agent_items(), st.lists(st.one_of(any_item, scalars), max_size=6)))
def test_malformed_items_convert_or_are_refused_as_by_the_general_path(items: list[Any]) -> None:
    check(items)


HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
    {"type": "message", "role": "user", "content": "u"},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "content": None},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "o"},
]
ODD: list[Any] = [
    *(MISSING, None, True, 1, "", "x", "c1", [], [1], [None], [{}], {"text": "x"}),
    *([{"text": 1}], [{"text": True}], [{"text": None, "refusal": "r"}], [{"refusal": "r"}]),
    *([{"text": ""}], [{"text": "a"}, {"text": "b"}], [{"type": "input_image"}]),
]


@pytest.mark.parametrize("value", ODD, ids=repr)
def test_any_field_of_any_shape_converts_as_by_the_general_path(value: Any) -> None:
    """Each field of each item of a short-path history, in turn, missing or of this shape."""
    for k, item in enumerate(HISTORY):
        for key in [*item, "call_id", "role"]:
            edited = {x: v for x, v in item.items() if x != key}
            if value is not MISSING:
                edited[key] = value
            check([*HISTORY[:k], edited, *HISTORY[k + 1 :]])


def test_an_agents_history_converts_as_by_the_general_path() -> None:
    check(responses_body(50_000, 200)["input"])


@settings(max_examples=200, deadline=None)
@given(parts)
def test_parts_text_joins_the_text_of_text_and_refusal_parts(content: Any) -> None:
    assert parts_text(content) == general_parts_text(content)


@settings(max_examples=120, deadline=None)
@given(histories(), st.booleans())
def test_a_tool_message_goes_back_as_the_general_path_sends_it(
    items: list[Any], edited: bool
) -> None:
    for message in items_to_messages(items):
        if message["role"] == "tool":
            if edited:
                message = {**message, "content": "[Compacted]"}
            expected = rb._tool_items(message, message[X_ITEMS])
            back = messages_to_items([message])
            assert orjson.dumps(back) == orjson.dumps(expected)
            assert [id(x) for x in back] == [id(x) for x in expected] or edited
