"""Thinking blocks bound to their prefix (Anthropic's prefix checks), and the proxy's part.

The first half shows the fake Messages API runs the check as Anthropic documents it: each
thinking block is signed over its prefix (system, tools, the messages and blocks before it),
a changed prefix is refused with a 400 naming the block, `cache_control` moves are not a
change, and `"drop_block"` (with its beta header) drops the invalid blocks and lists them in
`input_transformations`. The second half runs a 24-file tool loop with thinking through the
proxy with the Anthropic SDK, default strategy and the seed's compactor: level-1
placeholders, a summary and a hidden extract round all happen, and no request is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest

from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.claude_checks import (
    Checks,
    blocks,
    extract_rounds,
    is_placeholder,
    main_requests,
    messages_settings,
    request_problems,
    system_texts,
    tool_results,
)
from tests.support.claude_model import FINISHED, ReadFilesModel, ThinkingModel
from tests.support.fake_binding import BINDING_BETA, check_prefixes
from tests.support.fake_messages import FakeMessages, Turn, count_input_tokens
from tests.support.servers import UvicornThread
from tests.turn import test_append_only

pytestmark = pytest.mark.timeout(300)

MODEL = "claude-opus-5-5"  # a model that runs the prefix check
READ_TOOL = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
SYSTEM = [
    {"type": "text", "text": "You are a careful coding agent. " * 200},
    {
        "type": "text",
        "text": "Read files before answering.",
        "cache_control": {"type": "ephemeral"},
    },
]
THINKING = {"type": "enabled", "budget_tokens": 2048}
LINES = 60  # a file read is about 1,300 tokens
REFUSAL = (
    "Invalid `signature` in `thinking` block. The block is bound to a different conversation. "
    'Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture
def fake(server: FakeMessages) -> FakeMessages:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeMessages) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-test", max_retries=0) as c:
        yield c


def two_reads(client: anthropic.Anthropic, fake: FakeMessages) -> list[dict[str, Any]]:
    """Two thinking turns of a tool loop, sent back as they came: the history after them."""
    fake.push_turns(
        Turn.tool("read_file", {"path": "a"}, thinking="Read a first."),
        Turn.tool("read_file", {"path": "b"}, thinking="Now b."),
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read a then b."}]
    for path in ("a", "b"):
        reply = client.messages.create(
            model=MODEL,
            max_tokens=4096,
            system=SYSTEM,
            tools=[READ_TOOL],
            thinking=THINKING,
            messages=messages,
        )
        call = reply.content[-1]
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        result = {"type": "tool_result", "tool_use_id": call.id, "content": f"{path} " * 50}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_a_changed_prefix_is_refused_and_an_unchanged_one_passes(
    client: anthropic.Anthropic, fake: FakeMessages
) -> None:
    messages = two_reads(client, fake)
    args: dict[str, Any] = {"model": MODEL, "max_tokens": 4096, "tools": [READ_TOOL]}
    args["thinking"] = THINKING
    fake.push_turns(Turn.text("Done."), Turn.text("Done."))
    # the same history with the client's breakpoint moved to its last message passes
    moved = [dict(m) for m in messages]
    last = dict(moved[-1]["content"][0], cache_control={"type": "ephemeral"})
    moved[-1] = {"role": "user", "content": [last]}
    system = [SYSTEM[0], {k: v for k, v in SYSTEM[1].items() if k != "cache_control"}]
    done = client.messages.create(system=system, messages=moved, **args)
    assert done.content[-1].text == "Done."
    # an old tool result replaced: both thinking blocks after it are bound elsewhere; the
    # first one is named
    changed = [dict(m) for m in messages]
    changed[2] = {"role": "user", "content": [dict(messages[2]["content"][0], content="gone")]}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(system=SYSTEM, messages=changed, **args)
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["error"] == {
        "type": "invalid_request_error",
        "message": f"messages.3.content.0: {REFUSAL}",
    }
    # a summary in `system`, or a tool added: the first block is already invalid
    for variant in (
        {"system": [*SYSTEM, {"type": "text", "text": "Summary."}], "messages": messages},
        {"system": SYSTEM, "messages": messages, "tools": [READ_TOOL, {**READ_TOOL, "name": "x"}]},
    ):
        with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid"):
            client.messages.create(**{**args, **variant})
    # the blocks removed, from the first changed position on: valid
    removed = [changed[0], changed[1], changed[2], _without_thinking(changed[3]), changed[4]]
    fake.push_turns(Turn.text("Done."))
    assert client.messages.create(system=SYSTEM, messages=removed, **args).content[-1].text
    # leaving a block out between others is refused too
    skipped = [messages[0], _without_thinking(messages[1]), *messages[2:]]
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.3\.content\.0: Invalid"):
        client.messages.create(system=SYSTEM, messages=skipped, **args)


def _without_thinking(message: dict[str, Any]) -> dict[str, Any]:
    content = [b for b in message["content"] if b.get("type") != "thinking"]
    return {**message, "content": content}


def test_drop_block_drops_the_invalid_blocks_and_lists_them(
    client: anthropic.Anthropic, fake: FakeMessages
) -> None:
    messages = two_reads(client, fake)
    changed = [dict(m) for m in messages]
    changed[2] = {"role": "user", "content": [dict(messages[2]["content"][0], content="gone")]}
    thinking = {**THINKING, "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4096,
        "system": SYSTEM,
        "tools": [READ_TOOL],
        "thinking": thinking,
        "messages": changed,
    }
    # without its beta header the setting is refused
    with pytest.raises(anthropic.BadRequestError, match=BINDING_BETA):
        client.messages.create(**body)
    fake.push_turns(Turn.tool("read_file", {"path": "c"}, thinking="Then c."))
    headers = {"anthropic-beta": BINDING_BETA}
    raw = client.messages.with_raw_response.create(**body, extra_headers=headers)
    reply = raw.http_response.json()
    assert reply["input_transformations"] == [
        {"type": "thinking_dropped", "path": "messages.3.content.0", "reason": "prefix_mismatch"}
    ]
    assert fake.dropped and fake.dropped[-1][1] == reply["input_transformations"]
    # the thinking written after the drop is valid as long as the change stands
    call = reply["content"][-1]
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": "c"}
    later = [*changed, {"role": "assistant", "content": reply["content"]}]
    later.append({"role": "user", "content": [result]})
    fake.push_turns(Turn.text("Done."))
    again = client.messages.with_raw_response.create(
        **{**body, "messages": later}, extra_headers=headers
    ).http_response.json()
    assert [t["path"] for t in again["input_transformations"]] == ["messages.3.content.0"]
    assert (
        check_prefixes({**body, "messages": later}, fake.bound, drop=True).dropped
        == (again["input_transformations"])
    )


def test_models_without_the_check_keep_the_old_rules(
    client: anthropic.Anthropic, fake: FakeMessages
) -> None:
    fake.push_turns(Turn.tool("read_file", {"path": "a"}, thinking="Look."), Turn.text("Done."))
    args: dict[str, Any] = {"model": "claude-opus-4-8", "max_tokens": 4096}
    args |= {"tools": [READ_TOOL], "thinking": THINKING}
    user = [{"role": "user", "content": "Read a."}]
    first = client.messages.create(messages=user, **args)
    result = {"type": "tool_result", "tool_use_id": first.content[-1].id, "content": "a"}
    assistant = {"role": "assistant", "content": [b.model_dump() for b in first.content]}
    later = [*user, assistant, {"role": "user", "content": [result]}]
    done = client.messages.create(system="Another system.", messages=later, **args)
    assert done.content[-1].text == "Done."


# through the proxy ------------------------------------------------------------------------


def file_output(path: str) -> str:
    return "".join(f"{path} line {i:03d}: " + "y" * 60 + "\n" for i in range(LINES))


def run_loop(client: anthropic.Anthropic, paths: list[str], stream: bool) -> list[Any]:
    """A stateless agent: it sends the whole history each turn and runs `read_file`."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files in order."}]
    replies = []
    for _ in range(len(paths) + 3):
        args: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 4096,
            "system": SYSTEM,
            "tools": [READ_TOOL],
            "thinking": THINKING,
            "messages": messages,
        }
        if stream:
            with client.messages.stream(**args) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**args)
        replies.append(reply)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": file_output(c.input["path"])}
            for c in calls
        ]
        messages.append({"role": "user", "content": results})
    return replies


def sdk_run(
    paths: list[str], *, stream: bool, proxy: dict[str, Any] | None, extracts: int
) -> tuple[FakeMessages, ReadFilesModel, list[Any]]:
    """The loop against a prefix-checking fake, through a proxy with these settings or
    directly (`proxy` None)."""
    with FakeMessages() as fake:
        fake.policy = model = ThinkingModel(
            paths, tool="read_file", path_key="path", extracts=extracts
        )
        if proxy is None:
            with anthropic.Anthropic(
                base_url=fake.base_url, api_key="sk-ant-test", max_retries=0
            ) as client:
                return fake, model, run_loop(client, paths, stream)
        headers = {"X-Session-Id": f"binding-{stream}-{proxy.get('compactor')}"}
        with (
            UvicornThread(create_app(messages_settings(fake, **proxy))) as running,
            anthropic.Anthropic(
                base_url=running.url, api_key="sk-ant-test", max_retries=0, default_headers=headers
            ) as client,
        ):
            return fake, model, run_loop(client, paths, stream)


PATHS = [f"src/file_{n:02d}.py" for n in range(1, 25)]


def loop_checks(
    fake: FakeMessages, model: ReadFilesModel, replies: list[Any], direct: FakeMessages
) -> Checks:
    """The issue's list for one run through the proxy."""
    checks = Checks()
    loop = main_requests(fake, tool="read_file")
    final = replies[-1].content[-1]
    checks.check("the loop finishes", final.type == "text" and final.text == FINISHED, final)
    steps = sum(b.type == "tool_use" for r in replies for b in r.content)
    checks.check("24+ tool steps", steps >= 24, steps)
    refused = [f"{status}: {error['error']['message']}" for _, status, error in fake.refused]
    checks.check("no request is refused", refused == [], refused[:3])
    checks.check("every request is valid", request_problems(fake) == [], request_problems(fake))
    placeholders = [sum(map(is_placeholder, tool_results(body))) for body in loop]
    checks.check("old tool results become placeholders", any(placeholders), placeholders)
    summaries = ["Last file read:" in "\n".join(system_texts(body)) for body in loop]
    checks.check("a summary reaches later requests", any(summaries), model.proxy_summaries)
    last = count_input_tokens(loop[-1])
    direct_last = count_input_tokens(main_requests(direct, tool="read_file")[-1])
    checks.check(
        "the last request is at most 60% of the direct one",
        last <= 0.6 * direct_last,
        (last, direct_last),
    )
    valid = blocks(check_body(fake, loop[-1]), "assistant", "thinking")
    checks.check("the last request carries 3+ valid thinking blocks", len(valid) >= 3, len(valid))
    return checks


def check_body(fake: FakeMessages, body: dict[str, Any]) -> dict[str, Any]:
    """The body as the model reads it: every block bound elsewhere dropped."""
    return {**body, "messages": check_prefixes(body, fake.bound, drop=True).messages}


@pytest.fixture(scope="module")
def direct_run() -> FakeMessages:
    fake, _, replies = sdk_run(PATHS, stream=False, proxy=None, extracts=0)
    assert replies[-1].content[-1].text == FINISHED
    assert fake.refused == []
    return fake


@pytest.mark.parametrize("compactor", [None, "seed"], ids=["default", "seed"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_thinking_loop_through_the_proxy_is_never_refused(
    compactor: str | None, stream: bool, direct_run: FakeMessages
) -> None:
    settings = {"compactor": compactor, "token_threshold": 16_000}
    if compactor == "seed":
        settings |= {"toolcall_keep_max": 4, "summary_keep_max": 8}
    fake, model, replies = sdk_run(PATHS, stream=stream, proxy=settings, extracts=0)
    loop_checks(fake, model, replies, direct_run).verify()


@pytest.mark.parametrize("compactor", [None, "seed"], ids=["default", "seed"])
def test_a_hidden_extract_round_keeps_later_thinking_valid(
    compactor: str | None, direct_run: FakeMessages
) -> None:
    """The model calls the extract tool alone in a round, then thinks: what it wrote after
    the hidden round must keep its prefix in the session's later requests."""
    # Set so that the run does not end on a compaction (which leaves no thinking before it
    # valid); the default strategy's compactions fall at other turns than the seed's.
    threshold = 14_000 if compactor is None else 16_000
    settings = {"compactor": compactor, "token_threshold": threshold}
    if compactor == "seed":
        settings |= {"toolcall_keep_max": 4, "summary_keep_max": 8}
    fake, model, replies = sdk_run(PATHS, stream=True, proxy=settings, extracts=2)
    checks = loop_checks(fake, model, replies, direct_run)
    loop = main_requests(fake, tool="read_file")
    rounds = [pair for body in loop for pair in extract_rounds(body)]
    checks.check("the model called the extract tool", model.extracted != [], model.extracted)
    checks.check("the proxy answered it", rounds != [], rounds[:1])
    assert isinstance(model, ThinkingModel)
    checks.check("thinking followed a hidden round", model.after != [], model.after)
    # It goes up again, valid, in the client's next request (until a compaction moves it).
    valid = {
        b.get("thinking")
        for body in loop
        for b in blocks(check_body(fake, body), "assistant", "thinking")
    }
    lost = [text[:40] for text in model.after if text not in valid]
    checks.check("the thinking written after a hidden round stays valid", lost == [], lost)
    checks.verify()


@pytest.mark.parametrize("compactor", ["seed", "cache-aware"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_append_only_run_holds_with_bound_thinking(
    stream: bool, compactor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Messages append-only run (tests/turn/test_append_only.py: 34 turns, placeholders,
    summaries, hidden extract rounds) with a model that checks prefixes: thinking is removed
    only where a compaction rewrote the prefix, the removal repeats exactly on the next
    requests, and no request is refused."""
    monkeypatch.setattr(test_append_only, "MODEL", MODEL)
    test_append_only.test_messages_requests_are_append_only(stream, compactor)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_with_the_tool_always_there_thinking_before_the_first_change_survives_it(
    stream: bool,
) -> None:
    """`extract_tool: always` (the default): the proxy's tool is in the tools block from the
    first request on, so every compaction (placeholders, then a summary) leaves that block
    byte for byte as it was, and the thinking written before the first message a compaction
    rewrote keeps its prefix: the model still reads it (with the tool added at the first
    compaction, the tools block changed there and took every earlier block with it)."""
    settings = {"compactor": "seed", "token_threshold": 16_000, "extract_tool": "always"}
    settings |= {"toolcall_keep_max": 4, "summary_keep_max": 8}
    fake, _, _ = sdk_run(PATHS, stream=stream, proxy=settings, extracts=0)
    loop = main_requests(fake, tool="read_file")
    assert fake.refused == []
    tools = {orjson.dumps(body["tools"]) for body in loop}
    assert len(tools) == 1, "the tools block changed"
    assert loop[0]["tools"][-1]["name"] == EXTRACT_TOOL_NAME
    assert any("Last file read:" in "\n".join(system_texts(body)) for body in loop)
    first = next(n for n, body in enumerate(loop) if any(map(is_placeholder, tool_results(body))))
    body = loop[first]
    cut = next(
        n
        for n, message in enumerate(body["messages"])
        if any(is_placeholder(r) for r in tool_results({"messages": [message]}))
    )
    written = [
        b["thinking"] for b in blocks({"messages": body["messages"][:cut]}, "assistant", "thinking")
    ]
    valid = {b["thinking"] for b in blocks(check_body(fake, body), "assistant", "thinking")}
    assert written, "no thinking before the first placeholder"
    assert set(written) <= valid, "thinking written before the first change was lost"
