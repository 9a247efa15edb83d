"""The Responses API through the proxy, driven by OpenAI's own clients, through a compaction.

The openai SDK's `client.responses.create` (streamed and not) and the OpenAI Agents SDK with
its default model (`OpenAIResponsesModel`) each run a stateless tool loop (the whole history
in `input` every turn) through the proxy under real uvicorn, with a session header and a low
threshold, against the scripted Responses model of tests/support/fake_responses.py: it reads files
one per turn, reasons with `encrypted_content`, and calls `extract_compacted_tool_result` once
it sees a placeholder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIProvider, RunConfig, Runner, function_tool
from agents.tracing import get_trace_provider

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.fake_responses import (
    FILE_RE,
    PLACEHOLDER_RE,
    FakeResponses,
    ReadFiles,
    ResponsesRequest,
    Turn,
    after_summaries,
    file_text,
    input_items,
    item_text,
    seen_text,
    sequence_problems,
)
from tests.support.fake_upstream import RecordedRequest

FILES = 20
FILE_CHARS = 2000  # about 500 tokens a file
THRESHOLD = 4000  # crossed after about 7 files
SYSTEM = "You are a careful coding agent. Read what you are asked to read."
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


@pytest.fixture
def fake_upstream() -> Iterator[FakeResponses]:
    """The Responses fake in place of conftest's: `make_proxy` forwards to it."""
    with FakeResponses() as fake:
        fake.policy = ReadFiles(FILES, tool="read_file")
        yield fake


def _model(fake: FakeResponses) -> ReadFiles:
    assert isinstance(fake.policy, ReadFiles)
    return fake.policy


def _view(record: RecordedRequest) -> ResponsesRequest:
    return ResponsesRequest(record.json, input_items(record.json), record.headers)


def _model_requests(fake: FakeResponses) -> list[RecordedRequest]:
    return _model_only(fake.responses_requests)


def _model_only(records: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in records if not _view(r).is_summary_request()]


def _read(arguments: str) -> str:
    match = FILE_RE.search(arguments)
    assert match, arguments
    return file_text(int(match.group(1)), FILE_CHARS)


def _check_stream(events: list[Any]) -> Any:
    """One response as the client sees it: one created, one completed, numbers in order,
    output items announced in order, the completed output holding exactly those items, and
    none of them an extract call."""
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds.count("response.created") == 1
    assert kinds[-1] == "response.completed" and kinds.count("response.completed") == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e for e in events if e.type == "response.output_item.added"]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [e.output_index for e in added] == list(range(len(added)))
    assert [e.output_index for e in done] == list(range(len(done)))
    final = events[-1].response
    assert [item.id for item in final.output] == [e.item.id for e in done]
    for event in events:
        item = getattr(event, "item", None)
        assert getattr(item, "name", None) != EXTRACT_TOOL_NAME, "an extract call was streamed"
    return final


class ResponsesLoop:
    """A stateless Responses client: keeps the items, runs the tool, sends everything."""

    def __init__(self, client: openai.OpenAI, fake: FakeResponses, *, stream: bool) -> None:
        self.client = client
        self.fake = fake
        self.stream = stream
        # per client request: its usage, and the upstream requests made while it was served
        self.rounds: list[tuple[Any, list[RecordedRequest]]] = []
        self.items: list[dict[str, Any]] = [
            {"role": "developer", "content": SYSTEM},
            {"role": "user", "content": "Read file_1.txt, file_2.txt, ... one by one."},
        ]
        self.compaction: list[str | None] = []
        self.answer: str | None = None

    def step(self) -> None:
        kwargs: dict[str, Any] = {
            "model": "gpt-4.1",
            "input": self.items,
            "tools": [READ_TOOL],
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        before = len(self.fake.responses_requests)
        if self.stream:
            raw = self.client.responses.with_raw_response.create(stream=True, **kwargs)
            response = _check_stream(list(raw.parse()))
        else:
            raw = self.client.responses.with_raw_response.create(**kwargs)
            response = raw.parse()
        self.compaction.append(raw.headers.get("x-xun-compaction"))
        self.rounds.append((response.usage, self.fake.responses_requests[before:]))
        for item in response.output:
            self.items.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                assert item.name != EXTRACT_TOOL_NAME, "the proxy leaked its own tool call"
                output = _read(item.arguments)
                self.items.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )
            elif item.type == "message":
                self.answer = response.output_text

    def run(self, limit: int) -> None:
        for _ in range(limit):
            self.step()
            if self.answer is not None:
                return
        raise AssertionError(f"no answer after {limit} turns")


def _check_upstream(fake: FakeResponses, client_tools: list[dict[str, Any]]) -> None:
    """What the model received through the compacting path (issue 14's list)."""
    requests = fake.responses_requests
    for record in requests:
        assert sequence_problems(input_items(record.json)) == []
        for item in input_items(record.json):
            if item.get("encrypted_content") is not None:
                assert item["encrypted_content"] == fake.issued[item["id"]]
    placeholders = 0
    offered = False
    for record in _model_requests(fake):
        tools = record.json["tools"]
        extract = tools[-1]
        # The default (extract_tool: always): ours last in every request, from the first on.
        assert extract.get("name") == EXTRACT_TOOL_NAME, "the proxy's tool is missing"
        offered = True
        assert extract["type"] == "function" and "function" not in extract  # Responses shape
        assert tools[:-1] == client_tools
        outputs = [item_text(i) for i in input_items(record.json) if "call_id" in i]
        placeholders += sum(1 for text in outputs if PLACEHOLDER_RE.fullmatch(text))
    assert offered, "the proxy added no extract tool"
    summarised = any(_view(r).is_summary_request() for r in requests)
    assert placeholders or summarised, "nothing upstream was compacted"
    model = _model(fake)
    if placeholders:
        # The model asked for a compacted output back; the proxy answered it from the client's
        # own items, and the client never saw the call (checked at every step).
        assert model.extract_call_ids
        answers = [
            item_text(i)
            for r in requests
            for i in input_items(r.json)
            if i.get("call_id") == model.extract_call_ids[0] and "output" in i
        ]
        assert answers and "line: " in answers[0]
    if summarised:
        later = after_summaries(requests)
        assert later, "nothing was sent after the summary"
        for record, marker in later:
            assert marker in seen_text(record.json)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_sdk_tool_loop_through_a_compaction(
    fake_upstream: FakeResponses,
    make_proxy: MakeProxy,
    openai_client: OpenAIClientFactory,
    stream: bool,
) -> None:
    proxy = make_proxy(token_threshold=THRESHOLD)
    client = openai_client(proxy, session=f"responses-{stream}")
    loop = ResponsesLoop(client, fake_upstream, stream=stream)
    loop.run(limit=FILES + 5)
    assert loop.answer == f"Done: read {FILES} files."
    # The client's history is whole: every file, no placeholder.
    outputs = [i["output"] for i in loop.items if i.get("type") == "function_call_output"]
    assert outputs == [file_text(n, FILE_CHARS) for n in range(1, FILES + 1)]
    assert set(loop.compaction) & {"toolcall", "summary"}, loop.compaction
    _check_upstream(fake_upstream, [READ_TOOL])
    # A client request the proxy served in several rounds (its hidden extract calls) is one
    # response to the client, whose usage is the sum of the rounds'.
    hidden = [(usage, rounds) for usage, rounds in loop.rounds if len(_model_only(rounds)) > 1]
    assert hidden, "no client request needed a hidden extract round"
    for usage, rounds in hidden:
        answers = [fake_upstream.answer_to(r) for r in _model_only(rounds)]
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            assert getattr(usage, key) == sum(a["usage"][key] for a in answers if a), key


class ReadFilesWhole(ReadFiles):
    """The same model behind a server that ignores `stream`: every answer is the whole
    response object."""

    def __call__(self, request: ResponsesRequest) -> Turn:
        return dataclasses.replace(super().__call__(request), json_to_stream=True)


def test_a_streamed_loop_answered_whole_reaches_the_client_as_streams(
    fake_upstream: FakeResponses, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    """Each whole answer (the hidden extract rounds' too) reaches the SDK as the event stream
    it asked for: one response per request, no extract call, usage summed over rounds."""
    fake_upstream.policy = ReadFilesWhole(FILES, tool="read_file")
    proxy = make_proxy(token_threshold=THRESHOLD)
    client = openai_client(proxy, session="responses-whole")
    loop = ResponsesLoop(client, fake_upstream, stream=True)
    loop.run(limit=FILES + 5)
    assert loop.answer == f"Done: read {FILES} files."
    assert all(r.json.get("stream") for r in _model_requests(fake_upstream))
    _check_upstream(fake_upstream, [READ_TOOL])
    hidden = [(usage, rounds) for usage, rounds in loop.rounds if len(_model_only(rounds)) > 1]
    assert hidden, "no client request needed a hidden extract round"
    for usage, rounds in hidden:
        answers = [fake_upstream.answer_to(r) for r in _model_only(rounds)]
        assert usage.total_tokens == sum(a["usage"]["total_tokens"] for a in answers if a)


@pytest.fixture(scope="module")
def agents_tracing() -> None:
    """The Agents SDK makes its process-wide trace exporter (and its HTTP client) at its first
    run: made here, it belongs to the module, not to whichever test ran first."""
    get_trace_provider()


@pytest.mark.usefixtures("agents_tracing")
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_agents_sdk_default_model_through_a_compaction(
    fake_upstream: FakeResponses, make_proxy: MakeProxy, streamed: bool
) -> None:
    proxy = make_proxy(token_threshold=THRESHOLD)
    client = openai.AsyncOpenAI(
        base_url=proxy.base_url,
        api_key="sk-test-agents",
        default_headers={"X-Session-Id": f"agents-{streamed}"},
        max_retries=0,
    )

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return _read(path)

    agent = Agent(name="reader", instructions=SYSTEM, tools=[read_file])
    # The default provider: its default model is OpenAIResponsesModel on /v1/responses.
    config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
    prompt = "Read file_1.txt, file_2.txt, ... one by one."
    try:
        if streamed:
            run = Runner.run_streamed(agent, prompt, max_turns=FILES + 5, run_config=config)
            async for _ in run.stream_events():
                pass
            final = run.final_output
        else:
            result = await Runner.run(agent, prompt, max_turns=FILES + 5, run_config=config)
            final = result.final_output
    finally:
        await client.close()
    assert final == f"Done: read {FILES} files."
    requests = fake_upstream.responses_requests
    assert requests and all(r.path == "/v1/responses" for r in requests)
    assert requests[0].json["instructions"] == SYSTEM
    client_tools = [t for t in requests[0].json["tools"] if t["name"] != EXTRACT_TOOL_NAME]
    assert [t["name"] for t in client_tools] == ["read_file"]
    _check_upstream(fake_upstream, client_tools)
