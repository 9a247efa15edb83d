"""Anthropic Messages histories for the wire tests: a hand-written session and a generator.

`anthropic_errors` lists what Anthropic would refuse in a `messages` list (the rules the
adapter must keep after compaction), so tests can assert an empty list.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

SIG = "EqQBCkYIBxgCKkD+sig/with==padding"

SYSTEM_BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Tools: Read, Bash.", "cache_control": {"type": "ephemeral"}},
]


def tool_use(call_id: str, name: str = "Read", **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


def tool_result(call_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def session() -> list[dict[str, Any]]:
    """A Claude Code-like history: thinking, parallel calls, server tools, a mid system."""
    return [
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug in a.py"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Read both files.", "signature": SIG},
                {"type": "text", "text": "Reading."},
                tool_use("toolu_1", file_path="/a.py"),
                tool_use("toolu_2", file_path="/b.py"),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("toolu_1", "A" * 300),
                tool_result(
                    "toolu_2",
                    [{"type": "text", "text": "B" * 300}],
                    is_error=True,
                    cache_control={"type": "ephemeral"},
                ),
                {"type": "text", "text": "<system-reminder>be brief</system-reminder>"},
            ],
        },
        {"role": "system", "content": "The user switched to plan mode."},
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                 "input": {"query": "python bug"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                 "content": [{"type": "web_search_result", "url": "https://x", "title": "X",
                              "encrypted_content": "enc"}]},
                {"type": "future_block", "payload": {"k": 1}},
                tool_use("toolu_3", name="Bash", command="pytest"),
            ],
        },
        {"role": "user", "content": [tool_result("toolu_3", "C" * 300)]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Done.", "signature": SIG + "2"},
                {"type": "text", "text": "Fixed."},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}},
                {"type": "text", "text": "and this?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]  # fmt: skip


def anthropic_errors(messages: list[dict[str, Any]]) -> list[str]:
    """What Anthropic would refuse: a non-user start, a misplaced or orphan tool_result,
    a tool_use left unanswered by the next message."""
    errors = []
    if messages and messages[0].get("role") != "user":
        errors.append("first message is not a user message")
    for k, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg.get("content"), list) else []
        prev = messages[k - 1] if k else {}
        prev_content = prev.get("content") if isinstance(prev.get("content"), list) else []
        calls = [b["id"] for b in prev_content if b.get("type") == "tool_use"]
        if prev.get("role") != "assistant":
            calls = []
        kinds = [b.get("type") for b in content]
        results = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
        if results and msg.get("role") != "user":
            errors.append(f"{k}: tool_result outside a user message")
        if any(r not in calls for r in results):
            errors.append(f"{k}: tool_result without its tool_use just before")
        if "tool_result" in kinds and kinds[: len(results)] != ["tool_result"] * len(results):
            errors.append(f"{k}: tool_result blocks not first")
        if calls and k < len(messages) and set(calls) - set(results):
            errors.append(f"{k}: tool_use of message {k - 1} unanswered")
    return errors


# -- a generator of valid Messages requests -------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
cache = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])


@st.composite
def text_block(draw: st.DrawFn) -> dict[str, Any]:
    return {"type": "text", "text": draw(text) or "t", **draw(cache)}


@st.composite
def user_extra_block(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text", "image", "document", "unknown"]))
    if kind == "image":
        source = draw(
            st.sampled_from(
                [
                    {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
                    {"type": "url", "url": "https://example.com/a.png"},
                ]
            )
        )
        return {"type": "image", "source": source}
    if kind == "document":
        return {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": draw(text)},
        }
    if kind == "unknown":
        return {"type": "search_result", "source": "s", "title": "t", "content": []}
    return draw(text_block())


@st.composite
def result_content(draw: st.DrawFn) -> dict[str, Any]:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return {"content": draw(text)}
    if choice == 1:
        return {"content": draw(st.lists(text_block(), max_size=2))}
    if choice == 2:
        return {}
    return {"content": draw(text), "is_error": draw(st.booleans())}


@st.composite
def assistant(draw: st.DrawFn, call_ids: list[str]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocks.append({"type": "thinking", "thinking": draw(text), "signature": SIG + draw(text)})
    if draw(st.booleans()):
        blocks.append({"type": "redacted_thinking", "data": "r" + draw(text)})
    if draw(st.booleans()):
        blocks.append(draw(text_block()))
    if draw(st.booleans()):
        blocks.append({"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}})
        blocks.append({"type": "web_search_tool_result", "tool_use_id": "srv", "content": []})
    for call_id in call_ids:
        blocks.append({**tool_use(call_id, q=draw(text)), **draw(cache)})
    if draw(st.booleans()) and not call_ids:
        return {"role": "assistant", "content": draw(text) or "ok"}
    return {"role": "assistant", "content": blocks or [{"type": "text", "text": "ok"}]}


@st.composite
def requests(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    system = draw(
        st.one_of(
            st.none(),
            text,
            st.lists(text_block(), max_size=3),
        )
    )
    messages: list[dict[str, Any]] = []
    first = draw(st.one_of(text, st.lists(user_extra_block(), min_size=1, max_size=3)))
    messages.append({"role": "user", "content": first})
    counter = 0
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 4)) == 0:
            messages.append({"role": "system", "content": draw(text) or "note"})
        n_calls = draw(st.integers(0, 3))
        ids = [f"toolu_{counter + i}" for i in range(n_calls)]
        counter += n_calls
        messages.append(draw(assistant(ids)))
        if ids:
            order = draw(st.permutations(ids))
            blocks: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": i, **draw(result_content()), **draw(cache)}
                for i in order
            ]
            blocks += draw(st.lists(user_extra_block(), max_size=2))
            messages.append({"role": "user", "content": blocks})
        else:
            content = draw(st.one_of(text, st.lists(user_extra_block(), min_size=1, max_size=2)))
            messages.append({"role": "user", "content": content})
    return system, messages
