"""Codex CLI's remote compaction through the proxy (issue 25).

The real Codex CLI (tests/support/codex_cli.py) with its built-in OpenAI provider pointed at the
proxy and a low auto-compaction limit compacts remotely: an ordinary `/v1/responses` call
whose input ends in `{"type": "compaction_trigger"}`, answered with a `compaction` item that
its later inputs carry. Against the compacting fake (tests/support/fake_provider_compaction.py),
with the proxy's own threshold lower still, the run shows that the proxy compacts none of
those requests, that the compaction item goes back as issued, and that the proxy's own
compaction works on what follows it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.compact import PLACEHOLDER_TEMPLATE
from proxy.server.app import create_app
from tests.conftest import proxy_settings
from tests.support.codex_cli import run_codex
from tests.support.fake_provider_compaction import CompactingResponses
from tests.support.fake_responses import ResponsesRequest, Turn, file_text, input_items, item_text
from tests.support.servers import UvicornThread

FILES = 12
PROMPT = f"Read file_1.txt to file_{FILES}.txt one by one with cat, then say done."
PLACEHOLDER_HEAD = PLACEHOLDER_TEMPLATE.split("{key}")[0]


class ReadOnward:
    """Reads the next file each turn, remembering its progress itself (a compacted history
    shows only part of it); answers the proxy's summary requests with a summary."""

    def __init__(self) -> None:
        self.read = 0

    def __call__(self, request: ResponsesRequest) -> Turn:
        if request.is_summary_request():
            return Turn(text="## overview\nThe agent reads numbered files one by one.")
        if self.read >= FILES:
            return Turn(text=f"Done: read {FILES} files.", reasoning="All files are read.")
        self.read += 1
        call = {"cmd": f"cat file_{self.read}.txt", "yield_time_ms": 10000}
        return Turn.call("exec_command", call, reasoning=f"Next, read file {self.read}.")


def _placeholders(body: dict[str, Any]) -> int:
    outputs = [x for x in input_items(body) if x.get("type") == "function_call_output"]
    return sum(PLACEHOLDER_HEAD in item_text(x) for x in outputs)


def _summary(body: dict[str, Any]) -> bool:
    return ResponsesRequest(body, input_items(body), {}).is_summary_request()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, CompactingResponses]:
    tmp: Path = tmp_path_factory.mktemp("codex-remote")
    work = tmp / "work"
    work.mkdir()
    for n in range(1, FILES + 1):
        (work / f"file_{n}.txt").write_text(file_text(n, 2000))
    fake = CompactingResponses().start()
    fake.policy = ReadOnward()
    settings = proxy_settings(fake, token_threshold=2500, toolcall_keep_max=1)
    proxy = UvicornThread(create_app(settings)).start()
    try:
        codex = run_codex(
            proxy.url + "/v1",
            work,
            tmp / "home",
            PROMPT,
            timeout=180,
            auto_compact=10500,
            builtin_openai=True,
        )
    finally:
        proxy.stop()
        fake.stop()
    return codex, fake


def test_codex_compacts_remotely_through_the_proxy_and_finishes(
    run: tuple[Any, CompactingResponses],
) -> None:
    codex, fake = run
    assert codex.returncode == 0, codex.describe()
    assert codex.last_message.strip() == f"Done: read {FILES} files."
    bodies = [r.json for r in fake.responses_requests]
    assert len(fake.sent) == len(bodies), "the fake answered every request"
    triggers = [
        i for i, b in enumerate(bodies) if input_items(b)[-1].get("type") == "compaction_trigger"
    ]
    assert triggers, "Codex compacted remotely"
    for i in triggers:
        assert json.dumps(input_items(bodies[i])[-1]) == json.dumps({"type": "compaction_trigger"})
        assert i == 0 or not _summary(bodies[i - 1]), "the proxy made no summary for it"
        # What the proxy reclaimed before still applies to it, and nothing more.
        assert i > 0 and _placeholders(bodies[i]) == _placeholders(bodies[i - 1])
        answer = fake.sent[i]
        response = answer[-1]["response"] if isinstance(answer, list) else answer
        assert [x["type"] for x in response["output"]] == ["compaction"]


def test_the_compaction_item_goes_back_and_the_proxy_compacts_after_it(
    run: tuple[Any, CompactingResponses],
) -> None:
    _, fake = run
    after = []
    for body in (r.json for r in fake.responses_requests):
        items = input_items(body)
        marks = [k for k, x in enumerate(items) if x.get("type") == "compaction"]
        if marks and not _summary(body):
            assert all(
                items[k]["encrypted_content"] == fake.compactions[items[k]["id"]] for k in marks
            )
            after.append(items[marks[-1] + 1 :])
    assert after, "later requests carry the compaction item"
    placeholders = [
        sum(
            PLACEHOLDER_HEAD in item_text(x)
            for x in rest
            if x.get("type") == "function_call_output"
        )
        for rest in after
    ]
    assert any(placeholders), placeholders
