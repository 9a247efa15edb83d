"""Chat sessions survive models whose token count is not the proxy's estimate (issue 16).

A real server bills, and refuses, by what its tokenizer and chat template make of a request;
the proxy sizes what it sends by an estimate (chars / 4 + 4 a message). Each test runs a
scripted tool session through the proxy (real uvicorn, the official SDK, a session header)
against a fake of tests/support/fake_counting.py that counts otherwise (a chat template that drops
tool messages; a tokenizer that counts 1.5x) and refuses a prompt over its window with
OpenAI's `context_length_exceeded`. The threshold is the one a user sets for that window (60 %
of it), and the session grows past three times the window. What must hold:

- every turn is answered 200: no context-length refusal reaches the client;
- every tool result stays retrievable: once a result is no longer shown in full, the model asks
  for it back with `extract_compacted_tool_result`, and the proxy answers with the original;
- with `compactor: seed`, the seed's rules are what shape each request (placeholders, keep
  counts, escalation, the summary's system message).

tests/compaction/test_real_sizes_wires.py does the same on the Responses and Messages wires.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from proxy.compact import format_compacted_summary, placeholder_for
from proxy.session.extract_tool import EXTRACT_TOOL_NAME, content_text
from proxy.session.history import HIDDEN_KEY_PREFIX
from tests.conftest import proxy_settings
from tests.support.agent import SYSTEM, TOOLS, Agent, is_summary_request
from tests.support.fake_counting import ScaledUpstream, ToolBlindUpstream, chat_refusals
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.real_sizes import (
    COMPACTORS,
    MODEL,
    Outcome,
    Sizes,
    failures,
    file_body,
    serve_proxy,
    stuck,
)


class FileReader:
    """The model: reads src/file_N.py one a turn, saying `text_chars` of words first.

    Before reading, it asks back the oldest of its results that the request no longer shows in
    full (a placeholder, or summarised away) and that it has not checked yet, one a turn, and
    keeps the proxy's answer (`answers`). Once `draining`, it reads no more: it answers in text
    and only asks back what is left. Summary requests get a short summary.
    """

    def __init__(self, sizes: Sizes) -> None:
        self.sizes = sizes
        self.paths: dict[str, str] = {}  # read call id -> path, in order
        self.asked: dict[str, str] = {}  # extract call id -> read call id
        self.answers: dict[str, str] = {}  # read call id -> what the proxy answered
        self.waiting: list[str] = []  # hidden and unchecked, as of the last request
        self.summaries = 0
        self.draining = False

    def shown_in_full(self, messages: list[dict[str, Any]]) -> set[str]:
        return {
            str(m.get("tool_call_id"))
            for m in messages
            if m.get("role") == "tool"
            and m.get("tool_call_id") in self.paths
            and content_text(m.get("content"))
            == file_body(self.paths[str(m["tool_call_id"])], self.sizes.output_chars)
        }

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            self.summaries += 1
            return Reply.text(
                f"## overview\nSummary {self.summaries}: files 1 to {len(self.paths)} were read."
            )
        messages = body["messages"]
        last = messages[-1]
        if last.get("role") == "tool" and last.get("tool_call_id") in self.asked:
            self.answers[self.asked[last["tool_call_id"]]] = content_text(last.get("content"))
        full = self.shown_in_full(messages)
        self.waiting = [i for i in self.paths if i not in full and i not in self.answers]
        offered = any(
            (t.get("function") or {}).get("name") == EXTRACT_TOOL_NAME
            for t in body.get("tools") or []
        )
        if self.waiting and offered and last.get("tool_call_id") not in self.asked:
            call_id = f"call_x{len(self.asked):03d}"
            self.asked[call_id] = self.waiting[0]
            return Reply.tool(EXTRACT_TOOL_NAME, {"toolcall_id": self.waiting[0]}, id=call_id)
        words = ("I have read the previous file; the next one continues the module. " * 40)[
            : self.sizes.text_chars
        ]
        if self.draining:
            return Reply.text(words)
        n = len(self.paths) + 1
        call_id = f"call_read{n:03d}"
        self.paths[call_id] = f"src/file_{n}.py"
        return Reply.tool("read_file", {"path": self.paths[call_id]}, id=call_id, content=words)


class FileAgent(Agent):
    """The client: runs `read_file`, and says "Go on." after an answer in text."""

    def __init__(self, client: openai.OpenAI, sizes: Sizes) -> None:
        super().__init__(client, model=MODEL)
        self.sizes = sizes

    def run_tool(self, call: Any) -> str:
        return file_body(json.loads(call.function.arguments)["path"], self.sizes.output_chars)

    def step(self, **extra: Any) -> Any:
        last = self.messages[-1]
        if last["role"] == "assistant" and not last.get("tool_calls"):
            self.messages.append({"role": "user", "content": "Go on."})
        return super().step(**extra)


def take_turn(agent: FileAgent, fake: FakeUpstream) -> Outcome:
    before = len(fake.chat_requests)
    try:
        response = agent.step()
        outcome = Outcome(200, None, response.headers.get("x-xun-compaction"))
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        outcome = Outcome(exc.status_code, str(body.get("code")), None)
    outcome.requests = fake.chat_requests[before:]
    window = fake.context_window or 0
    for record in outcome.requests:
        tokens = fake.prompt_tokens(record.json)
        outcome.refused.append(tokens > window)
        kind = "summary" if is_summary_request(record.json) else "turn"
        outcome.trail.append(f"{kind} {tokens}" + (" refused" if tokens > window else ""))
    return outcome


CHAT_FAKES: dict[str, tuple[type[FakeUpstream], Sizes]] = {
    # Tool results are invisible to the bill: only the model's words and calls grow it.
    "tool-blind": (
        ToolBlindUpstream,
        Sizes(window=1536, output_chars=1600, text_chars=600, turns=32),
    ),
    "scaled-1.5x": (
        ScaledUpstream,
        Sizes(window=4096, output_chars=1200, text_chars=160, turns=30),
    ),
}


@dataclass
class ChatRun:
    """A finished chat session: the model, the client, each turn, and what the fake saw."""

    sizes: Sizes
    model: FileReader
    agent: FileAgent
    outcomes: list[Outcome]
    grown: int  # the client's whole history, by the fake's count
    refused: list[int]  # the tokens of each request the fake refused for its length
    sent: list[dict[str, Any]]  # the model requests (no summaries), in order


def run_chat(kind: str, compactor: str, sizes: Sizes | None = None) -> ChatRun:
    fake_class, default_sizes = CHAT_FAKES[kind]
    sizes = sizes or default_sizes
    with fake_class() as fake:
        fake.context_window = sizes.window
        fake.default = model = FileReader(sizes)
        settings = proxy_settings(fake, token_threshold=sizes.threshold, compactor=compactor)
        with (
            serve_proxy(settings) as proxy,
            openai.OpenAI(
                base_url=proxy.url + "/v1",
                api_key="sk-test",
                max_retries=0,
                default_headers={"X-Session-Id": f"{kind}-{compactor}"},
            ) as client,
        ):
            agent = FileAgent(client, sizes)
            outcomes: list[Outcome] = []
            while len(outcomes) < sizes.turns and not stuck(outcomes):
                outcomes.append(take_turn(agent, fake))
            model.draining = True
            # Until everything hidden was asked back; at least once, so the last result is sent.
            for drained in range(sizes.turns):
                if stuck(outcomes) or (
                    drained and not model.waiting and outcomes[-1].status == 200
                ):
                    break
                outcomes.append(take_turn(agent, fake))
        history = {"model": MODEL, "messages": agent.messages, "tools": TOOLS}
        return ChatRun(
            sizes=sizes,
            model=model,
            agent=agent,
            outcomes=outcomes,
            grown=fake.prompt_tokens(history),
            refused=[tokens for _, tokens in chat_refusals(fake)],
            sent=[r.json for r in fake.chat_requests if not is_summary_request(r.json)],
        )


@pytest.mark.parametrize("compactor", COMPACTORS)
@pytest.mark.parametrize("kind", list(CHAT_FAKES))
def test_a_chat_session_outgrows_the_window(kind: str, compactor: str) -> None:
    run = run_chat(kind, compactor)
    sizes, model, outcomes, grown, refused, sent = (
        run.sizes,
        run.model,
        run.outcomes,
        run.grown,
        run.refused,
        run.sent,
    )

    assert failures(outcomes) == [], f"refusals the upstream made: {refused}"
    assert grown >= 3 * sizes.window, f"the session reached only {grown} tokens"
    # Every result is retrievable: asked back and answered with the original, or still
    # shown in full to the model at the end.
    full = model.shown_in_full(sent[-1]["messages"])
    lost = [
        call_id
        for call_id, path in model.paths.items()
        if call_id not in full and model.answers.get(call_id) != file_body(path, sizes.output_chars)
    ]
    assert lost == [], f"results not retrievable: {lost}"
    assert model.answers, "nothing was ever compacted"
    if compactor == "seed":
        assert seed_rules_broken(outcomes) == []


def test_the_seed_rules_are_unchanged_when_nothing_is_refused() -> None:
    """A window that the seed's own rules keep the session under, billed at 1.5x: the seed
    compacts as it always did (two cheap rounds, then a summary; 12 results kept)."""
    sizes = Sizes(window=14_000, output_chars=1200, text_chars=100, turns=40)
    run = run_chat("scaled-1.5x", "seed", sizes)
    assert failures(run.outcomes) == [] and run.refused == []
    assert seed_rules_broken(run.outcomes) == [], seed_rules_broken(run.outcomes)
    levels = [o.compaction for o in run.outcomes if o.compaction not in ("none", None)]
    assert levels[:3] == ["toolcall", "toolcall", "summary"], levels


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def seed_rules_broken(outcomes: list[Outcome]) -> list[str]:
    """What in the upstream requests the seed's rules (seed-spec.md, section 3) would not do.

    - a level-1 placeholder is the seed's text for that result's id, in place;
    - placeholders are the oldest results: none follows a result shown in full;
    - a turn that reclaimed only (`toolcall`), on its first try, keeps the newest 12 in full;
    - after two cheap rounds the next compaction is a summary: never three `toolcall` turns
      without a summary between them;
    - a summary goes in the system message in the seed's template, and the client's system
      prompt follows it unchanged (a persist section).
    """
    broken: list[str] = []
    cheap_rounds = 0
    for number, outcome in enumerate(outcomes, 1):
        model = [
            r
            for r, refused in zip(outcome.requests, outcome.refused, strict=True)
            if not refused and not is_summary_request(r.json)
        ]
        for record in model:
            results = tool_messages(record.json)
            shown = [content_text(m.get("content")) for m in results]
            # (the proxy's answers to its hidden extract calls go back upstream too, and are
            # reclaimed under their own key)
            marks = [
                text
                in (
                    placeholder_for(str(m["tool_call_id"])),
                    placeholder_for(HIDDEN_KEY_PREFIX + str(m["tool_call_id"])),
                )
                for m, text in zip(results, shown, strict=True)
            ]
            if any(
                "[Compacted, ID:" in text
                for text, mark in zip(shown, marks, strict=True)
                if not mark
            ):
                broken.append(f"turn {number}: a placeholder not in the seed's text")
            if marks != sorted(marks, reverse=True):
                broken.append(f"turn {number}: a placeholder after a result shown in full")
        # The turn's first request (later ones add the extract round's answer), and the last.
        first = model[0].json if model else None
        last = model[-1].json if model else None
        if outcome.compaction == "toolcall" and first is not None and not any(outcome.refused):
            results = tool_messages(first)
            full = [
                m for m in results if not content_text(m.get("content")).startswith("[Compacted")
            ]
            if len(full) != min(12, len(results)):
                broken.append(f"turn {number}: toolcall kept {len(full)} results in full, not 12")
        if outcome.compaction == "toolcall":
            cheap_rounds += 1
            if cheap_rounds > 2:
                broken.append(f"turn {number}: a third cheap round without a summary")
        elif outcome.compaction == "summary":
            cheap_rounds = 0
            system = last["messages"][0]["content"] if last else ""
            summary_open = format_compacted_summary("").split("<conversation_summary>")[0]
            if not (system.startswith(summary_open) and system.endswith(SYSTEM)):
                broken.append(f"turn {number}: the summary's system message is not the seed's")
    return broken
