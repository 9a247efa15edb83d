"""How far the extract tool reaches (issue 35): a search reads only the request it answers, so
it never finds another session's or another tenant's content; a 100 KB original comes back in
pages of 20,000 characters, each saying where the next starts. Real uvicorn, the official
SDK, the fake Chat Completions upstream, the histories of `test_extract_search`."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.session.test_extract_search import (
    QUERIES,
    SEARCH,
    answered,
    chat_search_history,
    is_summary,
)
from tests.session.test_extract_wires import CHAT_TOOLS
from tests.support.fake_upstream import FakeUpstream, Reply

ASK = "Go on, and search."  # the user turn after which the scripted model searches
PAGE_CHARS = 20_000  # what one read returns of a long original at most


def _searching_model(body: dict[str, Any]) -> Reply:
    """Summaries; the five searches when the last user turn asks; else a plain answer."""
    if is_summary(body):
        return Reply.text("## overview\nsummary")
    if answered(body):
        return Reply.text("done")
    if ASK not in orjson.dumps(body).decode():
        return Reply.text("ok")
    calls = [
        {"name": EXTRACT_TOOL_NAME, "arguments": {"query": q}, "id": i} for i, q in QUERIES.items()
    ]
    return Reply(tool_calls=calls)


def _other_history() -> list[dict[str, Any]]:
    """The same shape as `chat_search_history`, none of its literals, a search asked for."""
    history = orjson.loads(
        orjson.dumps(chat_search_history())
        .decode()
        .replace("Needle", "Other")
        .replace("Go on.", ASK)
        .encode()
    )
    assert "Needle" not in orjson.dumps(history).decode()
    return list(history)


def _answers(fake: FakeUpstream) -> dict[str, str]:
    last = [r.json for r in fake.chat_requests if r.json and not is_summary(r.json)][-1]
    return {m["tool_call_id"]: m["content"] for m in last["messages"] if m["role"] == "tool"}


def test_a_search_never_finds_another_sessions_or_tenants_content(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    fake_upstream.default = _searching_model
    proxy = make_proxy(**SEARCH)
    owner = openai_client(proxy, session="alpha", api_key="sk-tenant-one")
    reply = owner.chat.completions.create(
        model="gpt-4o", messages=chat_search_history(), tools=CHAT_TOOLS
    )
    assert reply.choices[0].message.content == "ok"  # summarised: the literals are cut
    for session, key in (("beta", "sk-tenant-one"), ("alpha", "sk-tenant-two")):
        client = openai_client(proxy, session=session, api_key=key)
        reply = client.chat.completions.create(
            model="gpt-4o", messages=_other_history(), tools=CHAT_TOOLS
        )
        assert reply.choices[0].message.content == "done"
        answers = _answers(fake_upstream)
        assert set(answers) >= set(QUERIES)
        for call_id, query in QUERIES.items():
            assert answers[call_id] == f"No match for {query!r} in the compacted history."
    # The owner's own session still finds them.
    history = [
        *chat_search_history(),
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": ASK},
    ]
    reply = owner.chat.completions.create(model="gpt-4o", messages=history, tools=CHAT_TOOLS)
    assert reply.choices[0].message.content == "done"
    assert "UserNeedleAlpha" in _answers(fake_upstream)["s_user"]


BIG_ORIGINAL = "".join(f"line {n:06d} of a long build log\n" for n in range(3300))  # 102 KB


def _reading_model(body: dict[str, Any]) -> Reply:
    """Reads the big result's first page, then the page its pointer names, then answers."""
    pages = [m for m in body["messages"] if m["role"] == "tool" and m["tool_call_id"][:4] == "read"]
    if len(pages) == 2:
        return Reply.text("done")
    offset = 0
    if pages:
        offset = int(str(pages[-1]["content"]).rsplit("starts at offset ", 1)[1].rstrip(".]"))
    arguments = {"toolcall_id": "c_big", "offset": offset} if offset else {"toolcall_id": "c_big"}
    return Reply.tool(EXTRACT_TOOL_NAME, arguments, id=f"read{len(pages)}")


def test_a_100_kb_original_is_read_in_pages(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    assert len(BIG_ORIGINAL) > 100_000
    fake_upstream.default = _reading_model
    proxy = make_proxy(token_threshold=4000, toolcall_keep_max=1)
    function = {"name": "read", "arguments": "{}"}
    history = [
        {"role": "user", "content": "Build it."},
        *(
            m
            for call_id, content in (("c_big", BIG_ORIGINAL), ("c_last", "ok"))
            for m in (
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                },
                {"role": "tool", "tool_call_id": call_id, "content": content},
            )
        ),
    ]
    reply = openai_client(proxy).chat.completions.create(
        model="gpt-4o", messages=history, tools=CHAT_TOOLS
    )
    assert (
        reply.choices[0].message.content == "done" and reply.choices[0].message.tool_calls is None
    )
    sent = [r.json for r in fake_upstream.chat_requests if r.json]
    assert len(sent) == 3
    assert sent[0]["messages"][2]["content"].startswith("[Compacted, ID: c_big.")
    first, second = (
        next(m["content"] for m in sent[-1]["messages"] if m.get("tool_call_id") == f"read{n}")
        for n in (0, 1)
    )
    text1, _, note1 = first.rpartition("\n[")
    text2, _, note2 = second.rpartition("\n[")
    assert len(text1) == len(text2) == PAGE_CHARS
    assert note1 == (
        f"Characters 0-{PAGE_CHARS} of {len(BIG_ORIGINAL)}; the next page starts "
        f"at offset {PAGE_CHARS}.]"
    )
    assert text1 + text2 == BIG_ORIGINAL[: 2 * PAGE_CHARS]
    assert note2.endswith(f"starts at offset {2 * PAGE_CHARS}.]")
    # Each request carries what was read so far, never the whole original.
    assert all(len(orjson.dumps(body)) < len(BIG_ORIGINAL) for body in sent)
