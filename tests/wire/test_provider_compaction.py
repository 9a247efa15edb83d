"""The providers' own compaction passes through the proxy untouched (issue 25).

Real uvicorn, the official `openai` and `anthropic` SDKs with a session header, streamed and
not, against fakes that compact as the providers do (tests/support/fake_provider_compaction.py):

- every compaction item, block and field reaches the upstream byte for byte, and what the
  provider answers (the `compaction` item or block, its stream events, `stop_reason:
  "compaction"`, `context_management.applied_edits`, `usage.iterations`) reaches the client
  as the provider sent it;
- a request that asks the provider to compact is not compacted by the proxy as well, even
  far past its threshold (`x-xun-compaction: none`), while what the proxy compacted earlier
  in the session still applies to it;
- a history that opens with the provider's compaction is the session's new beginning: the
  item or block goes first, byte for byte, in every later request, and the proxy's own
  compaction (placeholders, a summary) works on what follows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.compact import PLACEHOLDER_TEMPLATE, SUMMARY_PROMPT
from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import proxy_settings
from tests.support.fake_messages import Turn as MessagesTurn
from tests.support.fake_messages import block_text
from tests.support.fake_provider_compaction import (
    COMPACT_BETA,
    CONTEXT_BETA,
    SUMMARIZE_BETA,
    CompactingMessages,
    CompactingResponses,
)
from tests.support.fake_responses import (
    ReadFiles,
    ResponsesRequest,
    file_text,
    input_items,
    item_text,
)
from tests.support.fake_upstream import RecordedRequest
from tests.support.servers import UvicornThread

TURNS_AFTER = 16  # agent turns after the provider's compaction
PLACEHOLDER_HEAD = PLACEHOLDER_TEMPLATE.split("{key}")[0]
STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


def exact(value: Any) -> str:
    """A JSON value as bytes whose order counts: what "byte for byte" compares."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --- Responses ------------------------------------------------------------------------------

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
INSTRUCTIONS = "You are a careful coding agent. Read what you are asked to read."


@pytest.fixture
def responses_fake() -> Iterator[CompactingResponses]:
    with CompactingResponses() as fake:
        fake.policy = ReadFiles(60, tool="read_file")
        yield fake


# The extract tool in every request the proxy takes as the session's own (none in a side
# request, which goes up as sent): its presence shows the session went on.
EVERY_REQUEST = "always"


def _responses_proxy(fake: CompactingResponses, **overrides: Any) -> UvicornThread:
    settings = proxy_settings(
        fake, token_threshold=3000, toolcall_keep_max=2, summary_keep_max=4, **overrides
    )
    return UvicornThread(create_app(settings))


def _model_records(fake: CompactingResponses) -> list[RecordedRequest]:
    return [
        r
        for r in fake.responses_requests
        if not ResponsesRequest(r.json, input_items(r.json), r.headers).is_summary_request()
    ]


class ResponsesAgent:
    """A stateless Responses client: the whole history in `input` every turn."""

    def __init__(self, client: openai.OpenAI, stream: bool) -> None:
        self.client = client
        self.stream = stream
        self.items: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
        self.headers: list[str] = []  # x-xun-compaction of each request
        self.received: list[Any] = []  # what the client got: the response, or its events

    def send(self, items: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """One request; the response as the client received it (a dict)."""
        args = {"model": "gpt-5.6", "instructions": INSTRUCTIONS, "tools": [READ_TOOL], **extra}
        raw = self.client.responses.with_raw_response.create(
            input=items,  # type: ignore[arg-type]
            stream=self.stream,
            **args,
        )
        self.headers.append(raw.headers.get("x-xun-compaction", ""))
        if not self.stream:
            response = raw.parse().to_dict()  # type: ignore[union-attr]
            self.received.append(response)
            return response
        events = [event.to_dict() for event in raw.parse()]  # type: ignore[union-attr]
        self.received.append(events)
        completed = [e for e in events if e["type"] == "response.completed"]
        assert completed, [e["type"] for e in events]
        return dict(completed[-1]["response"])

    def turn(self, **extra: Any) -> dict[str, Any]:
        """One agent turn: send, keep the output, run the read calls."""
        response = self.send(self.items, **extra)
        output = response["output"]
        self.items.extend(output)
        for item in output:
            if item.get("type") == "function_call":
                n = int(json.loads(item["arguments"])["path"].split("_")[1].split(".")[0])
                self.items.append(
                    {
                        "type": "function_call_output",
                        "call_id": item["call_id"],
                        "output": file_text(n, 2000),
                    }
                )
        return response


def echoed(sent: Any) -> Any:
    """What the fake sent, with the request fields a response echoes as the client sent them
    (the proxy's tool is not the client's, nor is its summary in `instructions`)."""
    client = {"instructions": INSTRUCTIONS, "tools": [READ_TOOL]}
    if isinstance(sent, list):
        return [
            {**e, "response": {**e["response"], **client}} if "response" in e else e for e in sent
        ]
    return {**sent, **client}


def _placeholders(record: RecordedRequest) -> int:
    return sum(
        PLACEHOLDER_HEAD in item_text(i)
        for i in input_items(record.json)
        if i.get("type") == "function_call_output"
    )


@STREAMS
def test_responses_compaction_trigger_and_the_history_after_it(
    responses_fake: CompactingResponses, stream: bool
) -> None:
    fake = responses_fake
    with (
        _responses_proxy(fake, extract_tool=EVERY_REQUEST) as proxy,
        openai.OpenAI(
            base_url=f"{proxy.url}/v1",
            api_key="sk-test",
            max_retries=0,
            default_headers={"X-Session-Id": f"remote-compaction-{stream}"},
        ) as client,
    ):
        agent = ResponsesAgent(client, stream)
        for _ in range(8):
            agent.turn()
        assert {"toolcall", "summary"} & set(agent.headers), agent.headers
        before = len(fake.responses_requests)

        # Codex's remote compaction: the whole history, then the trigger, on /v1/responses.
        managed = [{"type": "compaction", "compact_threshold": 200000}]
        sent = [*agent.items, {"type": "compaction_trigger"}]
        low = {"X-Xun-Token-Threshold": "500"}  # far past it: the proxy would compact
        answer = agent.send(sent, context_management=managed, extra_headers=low)
        asked = fake.responses_requests[before:]
        assert len(asked) == 1, "no summary request of the proxy's own beside it"
        upstream = asked[0].json
        assert exact(upstream["input"][-1]) == exact({"type": "compaction_trigger"})
        assert exact(upstream["context_management"]) == exact(managed)
        assert agent.headers[-1] == "none"
        assert _placeholders(asked[0]) > 0, "what the proxy compacted before still applies"
        assert [i["type"] for i in answer["output"]] == ["compaction"]
        assert agent.received[-1] == echoed(fake.sent[-1]), "it reaches the client unchanged"
        if stream:
            kinds = [e["type"] for e in agent.received[-1]]
            assert "response.compaction.compacting" in kinds

        # The compaction item opens every later input; the proxy compacts after it.
        compaction = answer["output"][0]
        agent.items = [compaction, {"role": "user", "content": "Go on reading the files."}]
        start = len(_model_records(fake))
        for _ in range(TURNS_AFTER):
            agent.turn()
    later = _model_records(fake)[start:]
    assert len(fake.sent) == len(fake.responses_requests), "every request was answered"
    assert all(exact(input_items(r.json)[0]) == exact(compaction) for r in later)
    offered = [EXTRACT_TOOL_NAME in [t.get("name") for t in r.json["tools"]] for r in later]
    assert all(offered), "the session goes on: no request is taken for a side request"
    assert any(_placeholders(r) for r in later), "the proxy's own compaction goes on after it"
    assert "summary" in agent.headers[-TURNS_AFTER:], agent.headers


@STREAMS
def test_responses_server_side_compaction_passes_and_the_proxy_stays_out(
    responses_fake: CompactingResponses, stream: bool
) -> None:
    fake = responses_fake
    managed = [{"type": "compaction", "compact_threshold": 2500}]
    with (
        _responses_proxy(fake) as proxy,
        openai.OpenAI(
            base_url=f"{proxy.url}/v1",
            api_key="sk-test",
            max_retries=0,
            default_headers={"X-Session-Id": f"server-compaction-{stream}"},
        ) as client,
    ):
        agent = ResponsesAgent(client, stream)
        outputs = [agent.turn(context_management=managed)["output"] for _ in range(10)]
    records = fake.responses_requests
    assert len(fake.sent) == len(records), "every request was answered"
    assert len(records) == 10, "no summary request: the proxy never compacts these"
    assert set(agent.headers) == {"none"}, agent.headers
    assert all(exact(r.json["context_management"]) == exact(managed) for r in records)
    assert not any(_placeholders(r) for r in records)
    opened = [o[0]["type"] for o in outputs]
    assert "compaction" in opened, opened  # the provider compacted past its threshold
    assert agent.received == [echoed(a) for a in fake.sent], "answers reach the client unchanged"
    last = input_items(records[-1].json)
    firsts = [i for i in last if i.get("type") == "compaction"]
    assert firsts and all(exact(i) in map(exact, agent.items) for i in firsts)


# --- Messages -------------------------------------------------------------------------------

MODEL = "claude-fable-5-1"
READ = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
SYSTEM = [{"type": "text", "text": "You are a careful coding agent. Read files in order."}]


def is_summary_request(body: dict[str, Any]) -> bool:
    """The proxy's own summary requests carry the seed's summary prompt."""
    opening = SUMMARY_PROMPT.splitlines()[0]
    messages = body.get("messages") or []
    last = block_text(messages[-1].get("content")) if messages else ""
    return opening in last or opening in block_text(body.get("system"))


def read_policy(body: dict[str, Any]) -> MessagesTurn:
    """Reads file n+1 after n reads shown in the request, with thinking; answers at 40.
    The proxy's summary requests get a summary."""
    if is_summary_request(body):
        return MessagesTurn.text("## Task\nRead the project's files in order, one per turn.")
    reads = sum(
        1
        for m in body.get("messages") or []
        for b in (m.get("content") if isinstance(m.get("content"), list) else [])
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == "read_file"
    )
    if reads >= 40:
        return MessagesTurn.text("All files read.", thinking="Done.")
    n = reads + 1
    return MessagesTurn.tool("read_file", {"path": f"src/f{n}.py"}, thinking=f"Read file {n}.")


def file_output(path: str) -> str:
    return "".join(f"{path} line {i:03d}: " + "y" * 60 + "\n" for i in range(40))


class MessagesAgent:
    """A stateless Messages client (the beta surface, as compaction needs it)."""

    def __init__(self, client: anthropic.Anthropic, stream: bool) -> None:
        self.client = client
        self.stream = stream
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
        self.headers: list[str] = []
        self.received: list[Any] = []

    def send(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        args: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 4096,
            "system": SYSTEM,
            "tools": [READ],
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": messages,
            **extra,
        }
        raw = self.client.beta.messages.with_raw_response.create(stream=self.stream, **args)
        self.headers.append(raw.headers.get("x-xun-compaction", ""))
        self.session = raw.headers.get("x-xun-session", "")
        if not self.stream:
            message = raw.parse().to_dict()  # type: ignore[union-attr]
            self.received.append(message)
            return message
        events = [event.to_dict() for event in raw.parse()]  # type: ignore[union-attr]
        self.received.append(events)
        return _message_of(events)

    def turn(self, **extra: Any) -> dict[str, Any]:
        message = self.send(self.messages, **extra)
        self.messages.append({"role": "assistant", "content": message["content"]})
        calls = [b for b in message["content"] if b["type"] == "tool_use"]
        if calls:
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": c["id"],
                    "content": file_output(c["input"]["path"]),
                }
                for c in calls
            ]
            self.messages.append({"role": "user", "content": results})
        return message


def unpinged(sent: Any) -> Any:
    """What the fake sent as the SDK yields it: without `ping` events."""
    if isinstance(sent, list):
        return [e for e in sent if e["type"] != "ping"]
    return sent


def _message_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a Messages event stream spells out (blocks as the client accumulates)."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = dict(event["message"])
        elif kind == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
            elif delta["type"] == "compaction_delta":
                block["content"] = delta["content"]
        elif kind == "message_delta":
            message["stop_reason"] = event["delta"]["stop_reason"]
            if "context_management" in event:
                message["context_management"] = event["context_management"]
            message["usage"] = {**message.get("usage", {}), **event["usage"]}
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text) if text else {}
    message["content"] = blocks
    return message


def _messages_proxy(fake: CompactingMessages, **overrides: Any) -> UvicornThread:
    settings = proxy_settings(
        fake,
        anthropic_base_url=fake.base_url,
        token_threshold=4000,
        toolcall_keep_max=2,
        summary_keep_max=4,
        **overrides,
    )
    return UvicornThread(create_app(settings))


def _client(proxy: UvicornThread, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.url,
        api_key="sk-ant-test",
        max_retries=0,
        default_headers={"X-Session-Id": session},
    )


def _results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def _message_placeholders(body: dict[str, Any]) -> int:
    return sum(PLACEHOLDER_HEAD in block_text(r.get("content")) for r in _results(body))


def _main(fake: CompactingMessages) -> list[RecordedRequest]:
    return [r for r in fake.messages_requests if not is_summary_request(r.json)]


@pytest.fixture
def messages_fake() -> Iterator[CompactingMessages]:
    with CompactingMessages() as fake:
        fake.policy = read_policy
        yield fake


@STREAMS
def test_messages_on_demand_compaction_and_the_history_after_it(
    messages_fake: CompactingMessages, stream: bool
) -> None:
    fake = messages_fake
    with (
        _messages_proxy(fake, extract_tool=EVERY_REQUEST) as proxy,
        _client(proxy, f"summarize-{stream}") as client,
    ):
        agent = MessagesAgent(client, stream)
        for _ in range(8):
            agent.turn()
        assert {"toolcall", "summary"} & set(agent.headers), agent.headers
        before = len(fake.messages_requests)

        config = {"type": "summarize", "instructions": "Keep the file names."}
        low = {"X-Xun-Token-Threshold": "500"}  # far past it: the proxy would compact
        answer = agent.send(
            agent.messages, compaction=config, betas=[SUMMARIZE_BETA], extra_headers=low
        )
        asked = fake.messages_requests[before:]
        assert len(asked) == 1, "no summary request of the proxy's own beside it"
        assert exact(asked[0].json["compaction"]) == exact(config)
        assert SUMMARIZE_BETA in asked[0].headers.get("anthropic-beta", "")
        assert agent.headers[-1] == "none"
        assert _message_placeholders(asked[0].json) > 0, "earlier compactions still apply"
        assert answer["stop_reason"] == "compaction"
        assert [b["type"] for b in answer["content"]] == ["compaction"]
        assert agent.received[-1] == unpinged(fake.sent[-1]), "it reaches the client unchanged"

        # The compaction block opens every later request; the proxy compacts after it.
        opening = {"role": "assistant", "content": answer["content"]}
        agent.messages = [opening, {"role": "user", "content": "Go on reading the files."}]
        start = len(_main(fake))
        for _ in range(TURNS_AFTER):
            agent.turn(betas=[SUMMARIZE_BETA])
        with httpx.Client(base_url=proxy.url) as admin:
            detail = admin.get(f"/admin/sessions/{agent.session}").json()
    later = _main(fake)[start:]
    assert fake.refused == []
    assert all(exact(r.json["messages"][0]) == exact(opening) for r in later)
    shown = [r for r in detail["conversation"] if r.get("role") != "system"]
    assert "compaction" in json.dumps(shown[0]), "operators see it where the upstream does"
    offered = [EXTRACT_TOOL_NAME in [t.get("name") for t in r.json["tools"]] for r in later]
    assert all(offered), "the session goes on: no request is taken for a side request"
    assert any(_message_placeholders(r.json) for r in later), "the proxy compacts after it"
    assert "summary" in agent.headers[-TURNS_AFTER:], agent.headers


@STREAMS
def test_messages_context_editing_and_server_compaction_pass(
    messages_fake: CompactingMessages, stream: bool
) -> None:
    fake = messages_fake
    managed = {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 2000},
                "keep": {"type": "tool_uses", "value": 2},
            },
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 5000}},
        ]
    }
    betas = [CONTEXT_BETA, COMPACT_BETA]
    with _messages_proxy(fake) as proxy, _client(proxy, f"edits-{stream}") as client:
        agent = MessagesAgent(client, stream)
        replies = [agent.turn(context_management=managed, betas=betas) for _ in range(12)]
    records = fake.messages_requests
    assert fake.refused == [], fake.refused
    assert len(records) == 12, "no summary request: the proxy never compacts these"
    assert set(agent.headers) == {"none"}, agent.headers
    assert all(exact(r.json["context_management"]) == exact(managed) for r in records)
    assert not any(_message_placeholders(r.json) for r in records)
    assert any(b["type"] == "compaction" for r in replies for b in r["content"])
    applied = [r.get("context_management") for r in replies]
    assert any(a and a["applied_edits"] for a in applied), applied
    assert any("iterations" in r["usage"] for r in replies)
    assert agent.received == [unpinged(a) for a in fake.sent], "answers reach it unchanged"


@STREAMS
def test_messages_clearing_edits_alone_leave_the_proxy_compacting(
    messages_fake: CompactingMessages, stream: bool
) -> None:
    """Claude Code sends `clear_thinking_20251015` (keep all) on every request: no request
    to compact, so the proxy compacts as usual, and the field passes as sent."""
    fake = messages_fake
    managed = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    with _messages_proxy(fake) as proxy, _client(proxy, f"clearing-{stream}") as client:
        agent = MessagesAgent(client, stream)
        for _ in range(10):
            agent.turn(context_management=managed, betas=[CONTEXT_BETA])
    assert fake.refused == []
    loop = _main(fake)
    assert all(exact(r.json["context_management"]) == exact(managed) for r in loop)
    assert {"toolcall", "summary"} & set(agent.headers), agent.headers
    assert any(_message_placeholders(r.json) for r in loop)
    assert all("context_management" in r for r in agent.received if isinstance(r, dict))


@STREAMS
def test_messages_a_paused_compaction_passes_and_the_client_goes_on_from_it(
    messages_fake: CompactingMessages, stream: bool
) -> None:
    """`pause_after_compaction`: the answer is the compaction block alone, `stop_reason:
    "compaction"`; the client sends it back and the conversation goes on from it."""
    fake = messages_fake
    edit = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 3000},
        "pause_after_compaction": True,
    }
    managed = {"edits": [edit]}
    with _messages_proxy(fake) as proxy, _client(proxy, f"paused-{stream}") as client:
        agent = MessagesAgent(client, stream)
        replies = [agent.turn(context_management=managed, betas=[COMPACT_BETA]) for _ in range(8)]
    assert fake.refused == []
    paused = [r for r in replies if r["stop_reason"] == "compaction"]
    assert paused and all([b["type"] for b in r["content"]] == ["compaction"] for r in paused)
    assert agent.received == [unpinged(a) for a in fake.sent], "answers reach it unchanged"
    block = paused[0]["content"][0]
    later = [r.json for r in fake.messages_requests if exact(block) in exact(r.json["messages"])]
    assert later, "the block goes back"
    assert all(exact(r["context_management"]) == exact(managed) for r in later)
    assert set(agent.headers) == {"none"}, agent.headers
