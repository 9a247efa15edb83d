"""Cache writes read on every wire, through the proxy under real uvicorn, driven by the
official SDKs, streamed and not: what the upstream reports as written into its prompt cache
(`cache_write_tokens` in Chat Completions' `prompt_tokens_details` and Responses'
`input_tokens_details`, from GPT-5.6 on; Anthropic's `cache_creation_input_tokens`) is
recorded with each turn (`cache_write_tokens` of the session's turn records), where the
cost-aware strategy reads the share of the uncached prompt that was written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.compaction.cache_aware import CacheAwareCompactor
from proxy.compaction.economics import observed_write_share
from tests.conftest import MakeProxy, OpenAIClientFactory
from tests.support.agent import ModelScript
from tests.support.claude_model import ReadFilesModel
from tests.support.compacted import ADMIN_KEY, admin_headers
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.wire_sessions import MESSAGES_TOOL, messages_file, wire_proxy

PADDING = "Project notes: keep the build green and the logs short. " * 150  # ~2,100 tokens


def turns_of(url: str) -> list[dict[str, Any]]:
    """The turn records of the proxy's only session, from the admin API."""
    listed = httpx.get(url + "/admin/sessions", headers=admin_headers(), timeout=30).json()
    assert len(listed["data"]) == 1, listed
    session = listed["data"][0]["id"]
    detail = httpx.get(f"{url}/admin/sessions/{session}", headers=admin_headers(), timeout=30)
    assert detail.status_code == 200, detail.text
    turns: list[dict[str, Any]] = detail.json()["turns"]
    return turns


class WritingModel(ModelScript):
    """Chat Completions usage as GPT-5.6 reports it: cache reads and cache writes."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: list[tuple[int, int, int]] = []  # prompt, cached, written

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = super().__call__(body)
        prompt = 3000 + 100 * self.turn
        cached, written = 1000 * (self.turn - 1), 300 + 7 * self.turn
        self.reported.append((prompt, cached, written))
        reply.usage_override = {
            "prompt_tokens": prompt,
            "prompt_tokens_details": {
                "cached_tokens": cached,
                "cache_write_tokens": written,
                "audio_tokens": 0,
            },
        }
        return reply


def test_chat_completions_cache_writes_are_recorded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, openai_client: OpenAIClientFactory
) -> None:
    model = WritingModel()
    fake_upstream.default = model
    proxy = make_proxy(admin_key=ADMIN_KEY)
    client = openai_client(proxy, session="writes-chat")
    messages: list[Any] = [{"role": "user", "content": "Read the files."}]
    seen: list[int] = []
    for turn in range(4):
        if turn % 2:
            stream = client.chat.completions.create(
                model="gpt-5.6",
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
            usage = chunks[-1].usage
            calls = [c for ch in chunks for d in ch.choices for c in d.delta.tool_calls or []]
            call_id = calls[0].id
        else:
            done = client.chat.completions.create(model="gpt-5.6", messages=messages)
            usage = done.usage
            call_id = done.choices[0].message.tool_calls[0].id
        assert usage is not None and usage.prompt_tokens_details is not None
        seen.append(usage.prompt_tokens_details.cache_write_tokens)
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": call_id, "content": f"file {turn}"},
        ]  # fmt: skip
    turns = turns_of(proxy.url)
    assert [t["cache_write_tokens"] for t in turns] == seen == [w for _, _, w in model.reported]
    assert [t["cached_tokens"] for t in turns] == [c for _, c, _ in model.reported]
    expected = [w / (p - c) for p, c, w in model.reported]
    assert observed_write_share(turns) == pytest.approx(sum(expected) / len(expected))


@pytest.mark.parametrize("stream", [False, True])
def test_responses_cache_writes_are_recorded(stream: bool) -> None:
    with (
        wire_proxy(admin_key=ADMIN_KEY) as proxy,
        openai.OpenAI(
            base_url=proxy.url + "/v1",
            api_key="sk-client",
            max_retries=0,
            default_headers={"session-id": "writes-responses"},
        ) as client,
    ):
        items: list[Any] = [{"role": "user", "content": PADDING}]
        seen: list[tuple[int, int, int]] = []
        for turn in range(3):
            if stream:
                with client.responses.stream(model="gpt-5.6", input=items, store=False) as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(model="gpt-5.6", input=items, store=False)
            usage = response.usage
            assert usage is not None
            written = usage.input_tokens_details.cache_write_tokens
            seen.append((usage.input_tokens, usage.input_tokens_details.cached_tokens, written))
            items += [
                {"role": "assistant", "content": response.output_text},
                {"role": "user", "content": f"And now part {turn}. " + PADDING},
            ]
        turns = turns_of(proxy.url)
    assert seen[0][2] > 0 and seen[1][1] > 0  # written, then read back
    assert [t["cache_write_tokens"] for t in turns] == [w for _, _, w in seen]
    assert [(t["prompt_tokens"], t["cached_tokens"]) for t in turns] == [(p, c) for p, c, _ in seen]


@pytest.mark.parametrize("stream", [False, True])
def test_messages_cache_writes_are_recorded(stream: bool) -> None:
    with (
        wire_proxy(admin_key=ADMIN_KEY) as proxy,
        anthropic.Anthropic(
            base_url=proxy.url,
            api_key="sk-ant-client",
            max_retries=0,
            default_headers={"x-claude-code-session-id": "writes-messages"},
        ) as client,
    ):
        system = [{"type": "text", "text": PADDING, "cache_control": {"type": "ephemeral"}}]
        messages: list[Any] = []
        seen: list[tuple[int, int, int]] = []
        for turn in range(3):
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": f"Part {turn}. " + PADDING,
                            "cache_control": {"type": "ephemeral"},
                        }
                    ],
                }
            )
            args: dict[str, Any] = dict(
                model="claude-opus-4-8", max_tokens=512, system=system, messages=messages
            )
            if stream:
                with client.messages.stream(**args) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(**args)
            usage = message.usage
            read = usage.cache_read_input_tokens or 0
            written = usage.cache_creation_input_tokens or 0
            seen.append((usage.input_tokens + read + written, read, written))
            # Only the newest breakpoint is kept: at most four are allowed.
            for earlier in messages:
                if earlier["role"] == "user":
                    earlier["content"] = [
                        {k: v for k, v in b.items() if k != "cache_control"}
                        for b in earlier["content"]
                    ]
            messages.append({"role": "assistant", "content": message.content})
        turns = turns_of(proxy.url)
    assert all(w > 0 for _, _, w in seen) and seen[1][1] > 0  # every turn writes its new part
    assert [t["cache_write_tokens"] for t in turns] == [w for _, _, w in seen]
    assert [(t["prompt_tokens"], t["cached_tokens"]) for t in turns] == [(p, c) for p, c, _ in seen]
    assert observed_write_share(turns) == pytest.approx(1.0)  # all it was sent uncached


@dataclass
class BreakEven(CacheAwareCompactor):
    """The cost-aware strategy waiting for the full break-even (patience 1)."""

    patience: float = 1.0


def first_compaction(ttl: str | None) -> tuple[int, list[int], Any]:
    """The turn at which the cost-aware strategy first compacts a Messages session whose
    client marks its newest block for caching with this lifetime, the writes recorded, and
    the last reply's `cache_creation` (the writes by lifetime)."""
    mark: dict[str, Any] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    # Compacting at break-even (patience 1), the dearer rewrite shows as a turn's wait where a
    # turn's saving is small beside the rewrite: at 10k, not at every threshold.
    with (
        wire_proxy(
            admin_key=ADMIN_KEY, compactor=f"{__name__}:BreakEven", token_threshold=10000
        ) as proxy,
        anthropic.Anthropic(
            base_url=proxy.url,
            api_key="sk-ant-client",
            max_retries=0,
            default_headers={"x-claude-code-session-id": f"ttl-{ttl}"},
        ) as client,
    ):
        paths = [f"src/file_{n:02d}.py" for n in range(1, 61)]
        proxy.messages.policy = ReadFilesModel(paths, tool="read_file", path_key="path")
        system = [{"type": "text", "text": "You read files.", "cache_control": mark}]
        messages: list[Any] = [
            {"role": "user", "content": [{"type": "text", "text": "Read the files in order."}]}
        ]
        for turn in range(60):
            # As Claude Code does: the newest user block carries the breakpoint.
            *blocks, last = messages[-1]["content"]
            newest = {"role": "user", "content": [*blocks, {**last, "cache_control": mark}]}
            sent = [*messages[:-1], newest]
            raw = client.messages.with_raw_response.create(
                model="claude-opus-4-8",
                max_tokens=4096,
                system=system,
                tools=[MESSAGES_TOOL],
                thinking={"type": "enabled", "budget_tokens": 2048},
                messages=sent,
            )
            if raw.headers["x-xun-compaction"] != "none":
                written = [t["cache_write_tokens"] for t in turns_of(proxy.url)]
                return turn, written, raw.parse().usage.cache_creation
            reply = raw.parse()
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
            )
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": b.id,
                            "content": messages_file(b.input["path"]),
                        }
                        for b in reply.content
                        if b.type == "tool_use"
                    ],
                }
            )
    raise AssertionError("never compacted")


def test_a_one_hour_cache_makes_the_rewrite_dearer_so_compaction_waits_longer() -> None:
    """Anthropic bills a 1-hour cache write at 2x, a 5-minute one at 1.25x: the lifetime the
    client asks for in `cache_control` prices the rewrite a compaction causes."""
    five, writes, by_ttl = first_compaction(None)
    assert all(isinstance(w, int) for w in writes) and max(writes) > 0  # writes recorded
    assert by_ttl.ephemeral_5m_input_tokens > 0 and by_ttl.ephemeral_1h_input_tokens == 0
    hour, _, by_ttl = first_compaction("1h")
    assert by_ttl.ephemeral_1h_input_tokens > 0 and by_ttl.ephemeral_5m_input_tokens == 0
    assert hour > five
