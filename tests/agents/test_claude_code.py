"""Claude Code itself (the pinned npm `@anthropic-ai/claude-code`) through the proxy.

`claude -p` runs offline with only `ANTHROPIC_BASE_URL` changed (tests/support/claude_cli.py),
against the fake Messages API (tests/support/fake_messages.py) playing a scripted model that reads
files with Claude Code's own `Read` tool, thinks before each call (signed thinking blocks), and
asks for compacted results back with the proxy's extract tool (tests/support/claude_model.py). The
same run is made directly against the fake, as the baseline.

The proxy's compacting path for `/v1/messages` is built on main after these tests: until the
proxy has its Anthropic upstream setting, the tests that need compaction are expected to fail
(`needs_messages_path` in tests/support/claude_checks.py), and the harness tests show Claude Code
runs against the fake.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.settings import Settings
from tests.support.claude_checks import (
    Checks,
    blocks,
    extract_rounds,
    is_placeholder,
    main_requests,
    messages_settings,
    request_problems,
    system_texts,
    tool_names,
    tool_results,
)
from tests.support.claude_cli import ClaudeRun, run_claude, write_files
from tests.support.claude_model import FINISHED, ReadFilesModel
from tests.support.fake_messages import FakeMessages, block_text, count_input_tokens
from tests.support.servers import UvicornThread

pytestmark = pytest.mark.timeout(180)

PROMPT = "Read every file in this directory in order, one file per turn, then say FINISHED."


@pytest.fixture
def fake() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


@pytest.fixture
def direct_fake() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


def claude_run(tmp_path: Path, base_url: str, args: list[str]) -> ClaudeRun:
    """One run in tmp_path/work, with a fresh home at the same place each time.

    Both runs of a comparison use the same paths, so Claude Code builds the same system
    prompt (it names the working and memory directories).
    """
    home = tmp_path / "home"
    shutil.rmtree(home, ignore_errors=True)
    return run_claude(base_url, tmp_path / "work", PROMPT, home=home, args=args)


def assert_finished(run: ClaudeRun) -> None:
    assert run.returncode == 0, run.describe()
    assert run.result.get("subtype") == "success", run.describe()
    assert run.result.get("result") == FINISHED, run.describe()


def transcript_text(run: ClaudeRun) -> str:
    return run.transcript_path().read_text()


# the harness: Claude Code directly against the fake ----------------------------------------


def test_claude_code_reads_files_against_the_fake(tmp_path: Path, fake: FakeMessages) -> None:
    """The harness works today: Claude Code runs the scripted session to its end."""
    paths = write_files(tmp_path / "work", 4, 40)
    fake.policy = model = ReadFilesModel(paths)
    run = claude_run(tmp_path, fake.base_url, [])
    assert_finished(run)

    assert request_problems(fake) == []
    requests = fake.messages_requests
    assert all(r.query == "beta=true" for r in requests)
    headers = requests[0].headers
    assert headers["x-api-key"] == "sk-ant-test-xun"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "claude-code-20250219" in headers["anthropic-beta"]
    assert headers["x-claude-code-session-id"] == run.session_id
    loop = main_requests(fake)
    assert len(loop) == len(paths) + 1
    # each turn's signed thinking comes back, and Claude Code sends its tools and system
    assert [len(blocks(body, "assistant", "thinking")) for body in loop] == list(range(5))
    assert "Read" in tool_names(loop[0]) and len(tool_names(loop[0])) > 10
    assert any(isinstance(b, dict) and "cache_control" in b for b in loop[0]["system"])
    assert model.own_compactions == 0 and model.extracted == []
    reads = [json.loads(line) for line in transcript_text(run).splitlines()]
    used = [
        b["input"]["file_path"]
        for record in reads
        if record.get("type") == "assistant"
        for b in record["message"]["content"]
        if b.get("type") == "tool_use"
    ]
    assert used == paths


def test_claude_code_own_compaction_against_the_fake(tmp_path: Path, fake: FakeMessages) -> None:
    """At 200k tokens Claude Code, talking to the model directly, compacts by itself.

    Claude Code 2.1.197 compacts reactively: it sends the session until the API answers
    "prompt is too long", then asks the model for a summary (its own prompt, recognised by
    `is_own_compaction_request`) and goes on from it. This is what the proxy must pre-empt.
    """
    paths = write_files(tmp_path / "work", 40, 250)  # about 5,000 tokens a file
    fake.policy = model = ReadFilesModel(paths)
    fake.context_window = 200_000
    run = claude_run(tmp_path, fake.base_url, ["--model", "claude-sonnet-4-5"])
    assert_finished(run)
    assert model.own_compactions >= 1
    too_long = [e for _, s, e in fake.refused if "prompt is too long" in e["error"]["message"]]
    assert too_long, "Claude Code compacted before the window was reached"


# through the proxy ------------------------------------------------------------------------


def test_claude_code_through_the_proxy_compacts(
    tmp_path: Path, fake: FakeMessages, direct_fake: FakeMessages
) -> None:
    """The issue's list, for a low threshold (16 files of about 3,000 tokens, threshold 32k)."""
    paths = write_files(tmp_path / "work", 16, 150)
    direct_fake.policy = ReadFilesModel(paths)
    direct = claude_run(tmp_path, direct_fake.base_url, [])
    assert_finished(direct)
    assert request_problems(direct_fake) == []

    fake.policy = model = ReadFilesModel(paths)
    settings = messages_settings(
        fake, token_threshold=32_000, toolcall_keep_max=2, summary_keep_max=4
    )
    app = create_app(settings)
    with UvicornThread(app) as proxy:
        run = claude_run(tmp_path, proxy.url, [])
    reuse = app.state.body_reuse

    checks = Checks()
    # Claude Code writes its bodies as orjson does, and moves its last cache breakpoint each
    # turn: a request parses on from the message before it (`proxy.turn.body_reuse`).
    checks.check(
        "requests parse only what they add",
        reuse.parsed >= len(paths) and reuse.reused >= 0.8 * reuse.parsed,
        (reuse.parsed, reuse.reused),
    )
    checks.check(
        "Claude Code finishes",
        run.returncode == 0 and run.result.get("result") == FINISHED,
        run.describe(),
    )
    loop = main_requests(fake)
    baseline = main_requests(direct_fake)
    checks.check("the model saw the session", len(loop) >= len(paths), len(loop))
    if not loop:
        checks.verify()

    placeholders = [sum(map(is_placeholder, tool_results(body))) for body in loop]
    checks.check("old tool results become placeholders", any(placeholders), placeholders)
    damaged = [
        number
        for number, body in enumerate(loop)
        if tool_results(body) and is_placeholder(tool_results(body)[-1])
    ]
    checks.check("the newest result always reaches the model intact", damaged == [], damaged)

    # what Claude Code sent for each call, as first seen upstream (before any compaction)
    originals: dict[str, str] = {}
    for body in loop:
        for result in tool_results(body):
            if not is_placeholder(result):
                originals.setdefault(result["tool_use_id"], block_text(result.get("content")))
    rounds = [pair for body in loop for pair in extract_rounds(body)]
    checks.check("the model called the extract tool", model.extracted != [], model.extracted)
    checks.check(
        "the proxy answered the extract call",
        rounds != [] and all(result is not None for _, result in rounds),
        rounds[:1],
    )
    wrong = [
        use["input"]
        for use, result in rounds
        if result is None
        or block_text(result.get("content")) != originals.get(use["input"].get("toolcall_id"))
    ]
    checks.check("the extract answer is the original result", wrong == [], wrong)
    checks.check(
        "the extract call is not in Claude Code's transcript",
        EXTRACT_TOOL_NAME not in transcript_text(run),
    )
    checks.check(
        "the extract call is not in Claude Code's output", EXTRACT_TOOL_NAME not in run.stdout
    )

    checks.check(
        "every request is valid for Anthropic (pairs, breakpoints, signatures)",
        request_problems(fake) == [],
        request_problems(fake),
    )
    thinking = [len(blocks(body, "assistant", "thinking")) for body in loop]
    checks.check("signed thinking comes back", max(thinking, default=0) > 0, thinking)

    client_tools, client_system = baseline[0]["tools"], baseline[0]["system"]
    changed_tools = [
        number
        for number, body in enumerate(loop)
        if [t for t in body.get("tools") or [] if t.get("name") != EXTRACT_TOOL_NAME]
        != client_tools
    ]
    checks.check("the client's tools pass unchanged", changed_tools == [], changed_tools)
    # By default (extract_tool: always) the tool is in every request, from the first on.
    no_extract = [n for n, body in enumerate(loop) if EXTRACT_TOOL_NAME not in tool_names(body)]
    checks.check("the extract tool is in every request", no_extract == [], no_extract)
    # block 0 is Claude Code's billing line, whose hash differs run to run
    changed_system = [
        number
        for number, body in enumerate(loop)
        if (body.get("system") or [])[1 : len(client_system)] != client_system[1:]
    ]
    checks.check("the client's system blocks are kept, in order", changed_system == [])
    summaries = [
        number
        for number, body in enumerate(loop)
        if "Last file read:" in "\n".join(system_texts(body))
    ]
    checks.check(
        "a summary reaches later requests",
        model.proxy_summaries > 0 and bool(summaries),
        (model.proxy_summaries, summaries),
    )
    # The artifact trail goes with the summary: the files Claude Code's Read tool read in
    # the summarised span, as its own arguments named them.
    texts = ["\n".join(system_texts(loop[n])) for n in summaries]
    trails = [t.split("## artifact_trail", 1)[1] for t in texts if "## artifact_trail" in t]
    checks.check(
        "the artifact trail names the files read before the summary",
        len(trails) == len(texts) > 0 and all(str(paths[0]) in trail for trail in trails),
        trails[:1],
    )

    last, direct_last = count_input_tokens(loop[-1]), count_input_tokens(baseline[-1])
    checks.check(
        "the last upstream request is at most 60% of the direct run's",
        last <= 0.6 * direct_last,
        f"{last} vs {direct_last}",
    )
    checks.check("Claude Code did not compact by itself", model.own_compactions == 0)
    checks.verify()


def test_claude_code_200k_session_is_compacted_by_the_proxy(
    tmp_path: Path, fake: FakeMessages
) -> None:
    """Default settings, a 200k-window model, ~220k tokens of reads: the proxy compacts first."""
    paths = write_files(tmp_path / "work", 40, 250)
    fake.policy = model = ReadFilesModel(paths)
    fake.context_window = 200_000
    settings = messages_settings(fake, compactor=None)
    defaults = Settings()
    assert settings.token_threshold == defaults.token_threshold  # nothing tuned
    with UvicornThread(create_app(settings)) as proxy:
        run = claude_run(tmp_path, proxy.url, ["--model", "claude-sonnet-4-5"])

    checks = Checks()
    checks.check(
        "Claude Code finishes",
        run.returncode == 0 and run.result.get("result") == FINISHED,
        run.describe(),
    )
    checks.check(
        "Claude Code never made its own compaction request",
        model.own_compactions == 0,
        model.own_compactions,
    )
    too_long = [e["error"]["message"] for _, s, e in fake.refused]
    checks.check("the upstream never refused a request", too_long == [], too_long)
    loop = main_requests(fake)
    compacted = [
        number
        for number, body in enumerate(loop)
        if any(map(is_placeholder, tool_results(body)))
        or "Last file read:" in "\n".join(system_texts(body))
    ]
    checks.check("the proxy compacted the session", compacted != [], len(loop))
    checks.check(
        "every request is valid for Anthropic", request_problems(fake) == [], request_problems(fake)
    )
    checks.verify()
