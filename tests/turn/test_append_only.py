"""The append-only invariant, on all three wires (issue 25).

For one session, what the proxy sends upstream is byte-stable from one request to the next
except where a compaction happens: the same system, the same tools (the extract tool in the
same place), the same rebuilt history, then what the client appended, or, inside one client
request, the proxy's own hidden extract round. Each wire runs a stateless tool loop of 30+
turns through the proxy (real uvicorn, the official SDK, the wire's faithful fake) with level-1
placeholders, summaries and hidden extract rounds; every upstream request is captured, and
each one must be the previous one plus what was appended, unless the client request it
served compacted (`x-xun-compaction`), which may rewrite it once, at its first request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import pytest

from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import SYSTEM, TOOLS, is_summary_request, tool_output
from tests.support.claude_checks import messages_settings, request_problems
from tests.support.claude_model import PLACEHOLDER, ReadFilesModel, is_proxy_summary_request
from tests.support.fake_messages import FakeMessages
from tests.support.fake_responses import (
    FILE_RE,
    PLACEHOLDER_RE,
    FakeResponses,
    ReadFiles,
    ResponsesRequest,
    Turn,
    input_items,
)
from tests.support.fake_upstream import FakeUpstream, RecordedRequest, Reply
from tests.support.servers import UvicornThread

TURNS = 34


def dumps(value: Any) -> str:
    """A value as its bytes on the wire would read: key order kept."""
    return json.dumps(value, ensure_ascii=False)


@dataclass
class Served:
    """One client request: what the proxy said it did, and the upstream requests it made."""

    compaction: str
    bodies: list[dict[str, Any]]


@dataclass
class Log:
    """The session's model requests in order, each with whether it may rewrite the prefix."""

    served: list[Served] = field(default_factory=list)

    def add(self, compaction: str, bodies: list[dict[str, Any]]) -> None:
        self.served.append(Served(compaction, bodies))

    def pairs(self) -> list[tuple[dict[str, Any], dict[str, Any], bool, bool]]:
        """(previous, request, at a compaction, across a hidden round) for each request."""
        out = []
        previous: dict[str, Any] | None = None
        hidden_before = False
        for served in self.served:
            for n, body in enumerate(served.bodies):
                if previous is not None:
                    compacted = n == 0 and served.compaction in ("toolcall", "summary")
                    out.append((previous, body, compacted, n == 0 and hidden_before))
                previous = body
            hidden_before = len(served.bodies) > 1
        return out


def append_only_problems(log: Log, history: str) -> tuple[list[str], int, int]:
    """What breaks the invariant; how many pairs were checked; how many spanned a hidden round."""
    problems: list[str] = []
    checked = across = 0
    for k, (prev, cur, compacted, hidden) in enumerate(log.pairs()):
        if compacted:
            continue
        checked += 1
        across += hidden
        for key in dict.fromkeys([*prev, *cur]):
            if key != history and dumps(prev.get(key)) != dumps(cur.get(key)):
                problems.append(f"request {k + 1}: field {key!r} changed")
        before, after = prev[history], cur[history]
        if len(after) < len(before):
            problems.append(f"request {k + 1}: history shorter ({len(after)} < {len(before)})")
            continue
        for i, (a, b) in enumerate(zip(before, after, strict=False)):
            if dumps(a) != dumps(b):
                problems.append(f"request {k + 1}: history item {i} changed: {dumps(a)[:300]}")
                break
    return problems, checked, across


def check(log: Log, history: str, compactions: list[str], compactor: str) -> None:
    problems, checked, across = append_only_problems(log, history)
    assert len(log.served) >= 30, len(log.served)
    assert "toolcall" in compactions, compactions
    # (the cost-aware strategy waits for a summary to pay for itself: not within these turns)
    assert compactor != "seed" or "summary" in compactions, compactions
    assert across >= 1, "no request went on from a hidden extract round"
    assert checked >= 20, checked
    assert problems == [], "\n".join(problems)


def recorded(
    fake: FakeUpstream, start: int, path: str, keep: Callable[[dict[str, Any]], bool]
) -> list[Any]:
    """The model requests (not the proxy's summary requests) made on `path` since `start`."""
    found: list[RecordedRequest] = fake.requests[start:]
    return [r.json for r in found if r.path == path and isinstance(r.json, dict) and keep(r.json)]


# -- Chat Completions ----------------------------------------------------------------------


class ChatModel:
    """Reads files one per turn; asks for a compacted result back (with a line of text)
    `extracts` times, one client request in `every`, from the first placeholder it sees on;
    summaries for the proxy's summary requests."""

    def __init__(self, extracts: int = 3, every: int = 3) -> None:
        self.turn = 0
        self.extracts = extracts
        self.every = every
        self.extracted: list[str] = []
        self.extracted_at = -1_000
        self.summaries = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            self.summaries += 1
            return Reply.text(f"## overview\nSummary number {self.summaries} of the work.")
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        due = self.turn >= self.extracted_at + self.every and len(self.extracted) < self.extracts
        if EXTRACT_TOOL_NAME in offered and due:
            for m in body["messages"]:
                found = PLACEHOLDER.search(str(m.get("content"))) if m["role"] == "tool" else None
                if found and found.group(1) not in self.extracted:
                    self.extracted.append(found.group(1))
                    self.extracted_at = self.turn
                    return Reply.tool(
                        EXTRACT_TOOL_NAME,
                        {"toolcall_id": found.group(1)},
                        content="I need an earlier result again. ",
                    )
        self.turn += 1
        return Reply.tool("read_file", {"path": f"src/file_{self.turn}.py"}, content="Reading.")


@pytest.mark.parametrize("compactor", ["seed", "cache-aware"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_completions_requests_are_append_only(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
    compactor: str,
) -> None:
    fake_upstream.default = model = ChatModel()
    proxy = make_proxy(token_threshold=8000, compactor=compactor)
    client = openai_client(proxy, session=f"append-chat-{stream}-{compactor}")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read the source files one by one."},
    ]
    log, compactions = Log(), []
    for _ in range(TURNS):
        start = len(fake_upstream.requests)
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=messages, tools=TOOLS, stream=stream
        )
        if stream:
            content, calls = "", {}
            for chunk in raw.parse():
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": tc.id, "arguments": ""})
                        slot["name"] = slot.get("name") or tc.function.name
                        slot["arguments"] += tc.function.arguments or ""
            message: dict[str, Any] = {"role": "assistant", "content": content or None}
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls.values()
            ]
        else:
            message = raw.parse().choices[0].message.model_dump()
        compactions.append(raw.headers["x-xun-compaction"])
        log.add(
            compactions[-1],
            recorded(
                fake_upstream, start, "/v1/chat/completions", lambda b: not is_summary_request(b)
            ),
        )
        messages.append(message)
        for call in message.get("tool_calls") or []:
            assert call["function"]["name"] != EXTRACT_TOOL_NAME
            output = tool_output(len(messages), 2000)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    assert model.extracted, "the model never asked for a compacted result"
    check(log, "messages", compactions, compactor)


# -- Responses -----------------------------------------------------------------------------

READ_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}


class LateExtract(ReadFiles):
    """`ReadFiles`, asking for a placeholder's original on the second request that shows one
    (not on the one that compacted: the request after the hidden round is checked too)."""

    def __init__(self, files: int, tool: str) -> None:
        super().__init__(files, tool=tool)
        self.seen = 0

    def __call__(self, request: ResponsesRequest) -> Turn:
        if request.is_summary_request() or self.extracted:
            return super().__call__(request)
        if any(PLACEHOLDER_RE.search(o) for o in request.outputs().values()):
            self.seen += 1
            if self.seen < 2:
                self.extracted.append("")  # not yet
                try:
                    return super().__call__(request)
                finally:
                    self.extracted.pop()
        return super().__call__(request)


def _responses_main(body: dict[str, Any]) -> bool:
    return not ResponsesRequest(body, input_items(body), {}).is_summary_request()


@pytest.mark.parametrize("compactor", ["seed", "cache-aware"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_requests_are_append_only(
    make_proxy: MakeProxy, openai_client: OpenAIClientFactory, stream: bool, compactor: str
) -> None:
    with FakeResponses() as fake:
        fake.policy = model = LateExtract(TURNS + 5, tool="read_file")
        proxy = make_proxy(
            token_threshold=3000,
            upstream_base_url=fake.url,
            toolcall_keep_max=2,
            summary_keep_max=4,
            compactor=compactor,
        )
        client = openai_client(proxy, session=f"append-responses-{stream}-{compactor}")
        items: list[dict[str, Any]] = [
            {"role": "developer", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Read file_1.txt, file_2.txt, ... one by one."},
        ]
        log, compactions = Log(), []
        for _ in range(TURNS):
            start = len(fake.requests)
            kwargs: dict[str, Any] = {
                "model": "gpt-4.1",
                "input": items,
                "tools": [READ_TOOL],
                "store": False,
                "include": ["reasoning.encrypted_content"],
            }
            raw = client.responses.with_raw_response.create(stream=stream, **kwargs)
            if stream:
                events = list(raw.parse())
                response = next(e.response for e in events if e.type == "response.completed")
            else:
                response = raw.parse()
            compactions.append(raw.headers["x-xun-compaction"])
            log.add(compactions[-1], recorded(fake, start, "/v1/responses", _responses_main))
            for item in response.output:
                items.append(item.model_dump(exclude_none=True))
                if item.type == "function_call":
                    assert item.name != EXTRACT_TOOL_NAME
                    n = int(FILE_RE.search(item.arguments).group(1))  # type: ignore[union-attr]
                    output = f"file {n}\n" + "line: x\n" * 120
                    items.append(
                        {"type": "function_call_output", "call_id": item.call_id, "output": output}
                    )
    assert model.extract_call_ids, "the model never asked for a compacted result"
    check(log, "input", compactions, compactor)


# -- Anthropic Messages --------------------------------------------------------------------

MODEL = "claude-opus-4-8"
MESSAGES_TOOL = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
MESSAGES_SYSTEM = [
    {"type": "text", "text": "You are a careful coding agent. " * 200},
    {
        "type": "text",
        "text": "Read files before answering.",
        "cache_control": {"type": "ephemeral"},
    },
]


@pytest.mark.parametrize("compactor", ["seed", "cache-aware"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_requests_are_append_only(stream: bool, compactor: str) -> None:
    paths = [f"src/file_{n:02d}.py" for n in range(1, TURNS + 5)]
    with FakeMessages() as fake:
        fake.policy = model = ReadFilesModel(paths, tool="read_file", path_key="path", extracts=2)
        settings = messages_settings(
            fake,
            token_threshold=8_000,
            toolcall_keep_max=2,
            summary_keep_max=4,
            compactor=compactor,
        )
        headers = {"X-Session-Id": f"append-messages-{stream}-{compactor}"}
        seen: list[str] = []  # each answer's x-xun-compaction, as the SDK's client read it

        def note(response: Any) -> None:
            seen.append(response.headers["x-xun-compaction"])

        with (
            UvicornThread(create_app(settings)) as proxy,
            anthropic.Anthropic(
                base_url=proxy.url,
                api_key="sk-ant-test",
                max_retries=0,
                default_headers=headers,
                http_client=anthropic.DefaultHttpxClient(event_hooks={"response": [note]}),
            ) as client,
        ):
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
            log = Log()
            for _ in range(TURNS):
                start = len(fake.requests)
                args: dict[str, Any] = {
                    "model": MODEL,
                    "max_tokens": 4096,
                    "system": MESSAGES_SYSTEM,
                    "tools": [MESSAGES_TOOL],
                    "thinking": {"type": "enabled", "budget_tokens": 2048},
                    "messages": messages,
                }
                if stream:
                    with client.messages.stream(**args) as events:
                        reply = events.get_final_message()
                else:
                    reply = client.messages.create(**args)
                main = recorded(
                    fake, start, "/v1/messages", lambda b: not is_proxy_summary_request(b)
                )
                log.add(seen[-1], main)
                messages.append(
                    {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
                )
                calls = [b for b in reply.content if b.type == "tool_use"]
                results = [
                    {"type": "tool_result", "tool_use_id": c.id, "content": "x = 1\n" * 400}
                    for c in calls
                ]
                if not results:
                    break
                messages.append({"role": "user", "content": results})
        problems = request_problems(fake)
    assert model.extracted, "the model never asked for a compacted result"
    assert problems == []
    check(log, "messages", seen, compactor)
