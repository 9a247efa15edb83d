"""Codex CLI itself through the proxy: `codex exec` against a scripted Responses model.

The pinned Codex CLI (tests/support/codex_cli.py, installed by scripts/test) runs a task twice with
the same scripted model (tests/fake_responses.ReadFiles): once straight to the fake, once
through the proxy under real uvicorn with a low token threshold. Codex is configured with
the provider's base URL only: the proxy finds the session by Codex's own `session-id` header.
The model reads files with Codex's `exec_command` tool, answers with reasoning items that
carry `encrypted_content`, and calls `extract_compacted_tool_result` once a placeholder
appears. The tests below check issue 14's list, each on its own, against both recordings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy.compact import placeholder_for
from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.conftest import proxy_settings
from tests.support.codex_cli import CodexRun, run_codex
from tests.support.fake_responses import (
    PLACEHOLDER_RE,
    FakeResponses,
    ReadFiles,
    ResponsesRequest,
    after_summaries,
    file_text,
    input_items,
    item_text,
    seen_text,
    sequence_problems,
)
from tests.support.fake_upstream import RecordedRequest
from tests.support.servers import UvicornThread

FILES = 20
FILE_CHARS = 6000  # under Codex's own output cap, so its tool outputs are the whole files
THRESHOLD = 16_000  # tokens; Codex's prompt and tools alone are about 10k
PROMPT = "Read every file_N.txt in this directory in order, then say how many you read."


@dataclass
class Recorded:
    """One Codex run and what reached the model."""

    codex: CodexRun
    fake: FakeResponses
    model: ReadFiles
    # Through the proxy: its requests of a session, and those parsed on from the last one.
    parsed: tuple[int, int] = (0, 0)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.fake.responses_requests

    def model_requests(self) -> list[RecordedRequest]:
        """The agent's turns, without the proxy's summary requests."""
        return [r for r in self.requests if not _view(r).is_summary_request()]

    def summary_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if _view(r).is_summary_request()]


def _view(record: RecordedRequest) -> ResponsesRequest:
    return ResponsesRequest(record.json, input_items(record.json), record.headers)


def _run(
    tmp: Path,
    name: str,
    through_proxy: bool,
    *,
    threshold: int | None = THRESHOLD,
    compactor: str | None = None,
    window: int | None = None,
) -> Recorded:
    """One Codex run; `threshold=None` leaves the proxy's default, `window` makes the fake
    refuse longer inputs as OpenAI does (400 `context_length_exceeded`)."""
    work = tmp / f"{name}-work"
    work.mkdir()
    for n in range(1, FILES + 1):
        (work / f"file_{n}.txt").write_text(file_text(n, FILE_CHARS))
    fake = FakeResponses().start()
    model = ReadFiles(FILES, tool="exec_command")
    fake.policy = model
    fake.context_window = window
    proxy = None
    app = None
    try:
        base_url = fake.url
        if through_proxy:
            # The product's defaults but the threshold (and the compactor, when named): the
            # session header Codex sends, the default compactor, the Responses adapter.
            overrides: dict[str, object] = {"compactor": compactor}
            if threshold is not None:
                overrides["token_threshold"] = threshold
            app = create_app(proxy_settings(fake, **overrides))
            proxy = UvicornThread(app).start()
            base_url = proxy.url + "/v1"
        codex = run_codex(base_url, work, tmp / f"{name}-home", PROMPT)
    finally:
        if proxy is not None:
            proxy.stop()
        fake.stop()
    reuse = app.state.body_reuse if app is not None else None
    parsed = (reuse.parsed, reuse.reused) if reuse is not None else (0, 0)
    return Recorded(codex, fake, model, parsed)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recorded, Recorded]:
    tmp = tmp_path_factory.mktemp("codex")
    return _run(tmp, "direct", through_proxy=False), _run(tmp, "proxied", through_proxy=True)


@pytest.fixture(scope="module")
def summarised(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """A run through the seed's rules, which escalate to a summary after two rounds of
    reclaiming; the cost-aware default reclaims these file reads and has no need to."""
    tmp = tmp_path_factory.mktemp("codex-seed")
    return _run(tmp, "summarised", through_proxy=True, compactor="seed")


@pytest.fixture
def direct(runs: tuple[Recorded, Recorded]) -> Recorded:
    return runs[0]


@pytest.fixture
def proxied(runs: tuple[Recorded, Recorded]) -> Recorded:
    return runs[1]


def _outputs_in_session(run: Recorded) -> dict[str, str]:
    """Codex's own record of its tool outputs, by call id."""
    return {
        str(item["call_id"]): item_text(item)
        for item in run.codex.session_items()
        if item.get("type") == "function_call_output"
    }


# --- the harness itself: these hold with the pass-through as well ---------------------------


@pytest.mark.parametrize("which", ["direct", "proxied"])
def test_codex_finishes(runs: tuple[Recorded, Recorded], which: str) -> None:
    run = runs[0] if which == "direct" else runs[1]
    assert run.codex.returncode == 0, run.codex.describe()
    assert run.codex.last_message.strip() == f"Done: read {FILES} files.", run.codex.describe()
    # Codex really ran its shell tool: every file's content is in its own session record.
    outputs = "\n".join(_outputs_in_session(run).values())
    for n in range(1, FILES + 1):
        assert f"file {n} line: " in outputs
    assert run.codex.session_files(), "Codex wrote no session file"


def test_what_codex_sends(direct: Recorded) -> None:
    """The facts the Responses adapter relies on, as Codex sends them to any provider."""
    first = direct.requests[0]
    body = first.json
    assert first.headers["session-id"]
    assert first.headers["accept"] == "text/event-stream"
    assert body["stream"] is True
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["prompt_cache_key"] == first.headers["session-id"]
    assert "previous_response_id" not in body
    names = [t.get("name") for t in body["tools"]]
    assert "exec_command" in names
    assert {t["type"] for t in body["tools"]} >= {"function", "namespace", "web_search"}
    # Codex puts its instructions in a developer item, not in `instructions`.
    assert body.get("instructions") is None
    assert body["input"][0]["role"] == "developer"
    # One session id for the whole run.
    assert {r.headers["session-id"] for r in direct.requests} == {first.headers["session-id"]}


def test_codex_requests_parse_only_what_they_add(proxied: Recorded) -> None:
    """Codex writes its bodies as orjson does: after a session's first request, each one
    parses only the items it adds (`proxy.turn.body_reuse`)."""
    requests, reused = proxied.parsed
    assert requests >= FILES and reused == requests - 1, proxied.parsed


def test_every_upstream_request_is_a_valid_item_sequence(proxied: Recorded) -> None:
    assert proxied.requests
    for record in proxied.requests:
        assert sequence_problems(input_items(record.json)) == []


def test_encrypted_content_comes_back_unchanged(proxied: Recorded) -> None:
    sent_back = 0
    for record in proxied.model_requests()[1:]:
        for item in input_items(record.json):
            if item.get("type") == "reasoning":
                assert item["encrypted_content"] == proxied.fake.issued[item["id"]]
                sent_back += 1
    assert sent_back >= FILES


def test_the_proxied_run_reads_what_the_direct_run_reads(
    direct: Recorded, proxied: Recorded
) -> None:
    """Codex's own history is the same either way: the proxy changes what the model sees
    only, and no placeholder or extract call ever reaches Codex."""

    def files_read(run: Recorded) -> list[str]:
        # What follows Codex's header (chunk id, wall time, exit code) of each output.
        return sorted(text.split("Output:\n", 1)[-1] for text in _outputs_in_session(run).values())

    assert files_read(direct) == files_read(proxied)
    assert len(files_read(direct)) == FILES
    for item in proxied.codex.session_items():
        assert not PLACEHOLDER_RE.search(json.dumps(item))


# --- the compacting path (issue 14, "What it must show") ------------------------------------


def test_old_outputs_become_placeholders_and_the_newest_stays_intact(proxied: Recorded) -> None:
    originals = _outputs_in_session(proxied)
    placeholders = 0
    for record in proxied.model_requests():
        outputs = [i for i in input_items(record.json) if i.get("type") == "function_call_output"]
        for item in outputs:
            text = item_text(item)
            match = PLACEHOLDER_RE.fullmatch(text)
            if match:
                assert text == placeholder_for(match.group("key"))
                placeholders += 1
        client_outputs = [i for i in outputs if i["call_id"] in originals]
        if client_outputs:
            newest = client_outputs[-1]
            assert item_text(newest) == originals[newest["call_id"]], "the newest output changed"
    assert placeholders > 0, "no tool output was ever replaced by a placeholder"


def test_the_extract_call_is_answered_by_the_proxy_and_hidden_from_codex(
    proxied: Recorded,
) -> None:
    model = proxied.model
    assert model.extract_call_ids, "the model never saw a placeholder to extract"
    call_id = model.extract_call_ids[0]
    answers = [
        item
        for record in proxied.requests
        for item in input_items(record.json)
        if item.get("type") == "function_call_output" and item.get("call_id") == call_id
    ]
    assert answers, "the proxy never answered the extract call"
    assert "line: " in item_text(answers[0]), item_text(answers[0])[:300]
    assert "Compacted, ID" not in item_text(answers[0])
    for path in proxied.codex.session_files():
        text = path.read_text()
        assert call_id not in text
        for line in text.splitlines():
            record = json.loads(line)
            payload = record.get("payload") if record.get("type") == "response_item" else None
            if isinstance(payload, dict):
                assert payload.get("name") != EXTRACT_TOOL_NAME


def test_the_client_tools_arrive_unchanged(direct: Recorded, proxied: Recorded) -> None:
    for direct_request in direct.requests:
        assert direct_request.json["tools"] == direct.requests[0].json["tools"]
    codex_tools = direct.requests[0].json["tools"]
    for record in proxied.model_requests():
        tools = record.json["tools"]
        assert [t for t in tools if t.get("name") != EXTRACT_TOOL_NAME] == codex_tools


def test_the_extract_tool_is_added_in_the_responses_shape(proxied: Recorded) -> None:
    # By default (extract_tool: always) it is in every request, last, from the first on.
    offered = [EXTRACT_TOOL_NAME in str(r.json["tools"]) for r in proxied.model_requests()]
    assert offered and False not in offered, offered
    for record in proxied.model_requests():
        extract = record.json["tools"][-1]
        assert extract["type"] == "function"
        assert extract["name"] == EXTRACT_TOOL_NAME
        assert "function" not in extract  # the Responses shape, not Chat Completions'
        assert list(extract["parameters"]["properties"]) == ["toolcall_id", "offset", "query"]
        assert extract["strict"] is False  # else OpenAI would require every parameter


def test_a_summary_reaches_later_requests(summarised: Recorded) -> None:
    proxied = summarised
    assert proxied.codex.last_message.strip() == f"Done: read {FILES} files."
    summaries = proxied.summary_requests()
    assert summaries, "the proxy made no summary request"
    assert summaries[0].json.get("store") is False
    later = after_summaries(proxied.requests)
    assert later, "nothing was sent after the summary"
    codex_developer = proxied.requests[0].json["input"][0]
    for record, marker in later:
        seen = seen_text(record.json)
        assert marker in seen
        # The summary joins Codex's own instructions, never replaces them.
        assert codex_developer in input_items(record.json)
        # The artifact trail goes with it: the files Codex read in the summarised span,
        # named as Codex's own exec_command named them.
        assert "## artifact_trail" in seen
        assert "file_1.txt" in seen.split("## artifact_trail", 1)[1]


def test_the_last_request_is_at_most_60_percent_of_the_direct_one(
    direct: Recorded, proxied: Recorded
) -> None:
    direct_last = direct.model_requests()[-1]
    proxied_last = proxied.model_requests()[-1]
    ratio = len(proxied_last.body) / len(direct_last.body)
    assert ratio <= 0.6, f"{len(proxied_last.body)} / {len(direct_last.body)} = {ratio:.2f}"


# --- the reactive path: a window smaller than the session, and the proxy's default threshold --

WINDOW = 30_000  # tokens: the direct run needs about 46k


@pytest.fixture(scope="module")
def window_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recorded, Recorded]:
    tmp = tmp_path_factory.mktemp("codex-window")
    direct = _run(tmp, "direct", through_proxy=False, window=WINDOW)
    proxied = _run(tmp, "proxied", through_proxy=True, threshold=None, window=WINDOW)
    return direct, proxied


def test_directly_codex_runs_out_of_the_window(window_runs: tuple[Recorded, Recorded]) -> None:
    run = window_runs[0].codex
    assert run.returncode != 0, run.describe()
    assert "ran out of room in the model's context window" in run.stderr, run.describe()


def test_through_the_proxy_codex_finishes_in_the_same_window(
    window_runs: tuple[Recorded, Recorded],
) -> None:
    """The fake refuses for length; the proxy compacts and retries (the reactive path), so
    Codex never sees the refusal."""
    proxied = window_runs[1]
    assert proxied.codex.returncode == 0, proxied.codex.describe()
    assert proxied.codex.last_message.strip() == f"Done: read {FILES} files."
    for record in proxied.requests:
        assert sequence_problems(input_items(record.json)) == []
