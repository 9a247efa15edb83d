"""Claude Code (the real CLI) through the proxy against a model that checks thinking prefixes.

The fake Messages API runs Anthropic's prefix checks (tests/support/fake_binding.py): every thinking
block Claude Code sends back must come under the prefix it was written under. Claude Code
keeps its history append-only, so directly it is never refused; through the proxy a
compaction changes the prefix, and the proxy must remove the blocks it moved
(proxy.wire.messages.binding). The issue's run (24 files, default strategy, threshold
16000) had 26 of 52 requests refused, every one after the first compaction, and Claude Code
resent each without thinking.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
from tests.support.claude_checks import (
    Checks,
    blocks,
    bodies,
    extract_rounds,
    is_placeholder,
    main_requests,
    messages_settings,
    system_texts,
    tool_results,
)
from tests.support.claude_cli import ClaudeRun, run_claude, write_files
from tests.support.claude_model import FINISHED, ThinkingModel
from tests.support.fake_binding import check_prefixes
from tests.support.fake_messages import FakeMessages, count_input_tokens
from tests.support.servers import UvicornThread

pytestmark = pytest.mark.timeout(300)

PROMPT = "Read every file in this directory in order, one file per turn, then say FINISHED."
MODEL = "claude-opus-5-5"  # runs the prefix check
FILES, LINES = 24, 60  # about 1,300 tokens a file


def claude_run(tmp_path: Path, base_url: str) -> ClaudeRun:
    home = tmp_path / "home"
    shutil.rmtree(home, ignore_errors=True)
    return run_claude(base_url, tmp_path / "work", PROMPT, home=home, args=["--model", MODEL])


def valid_thinking(fake: FakeMessages, body: dict[str, object]) -> list[str]:
    """The texts of a request's thinking blocks that pass the prefix check."""
    seen = {**body, "messages": check_prefixes(body, fake.bound, drop=True).messages}
    return [str(b.get("thinking")) for b in blocks(seen, "assistant", "thinking")]


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeMessages]:
    """Claude Code straight to the checking fake: append-only, never refused."""
    tmp_path = tmp_path_factory.mktemp("direct")
    paths = write_files(tmp_path / "work", FILES, LINES)
    with FakeMessages() as fake:
        fake.policy = ThinkingModel(paths)
        run = claude_run(tmp_path, fake.base_url)
        assert run.returncode == 0 and run.result.get("result") == FINISHED, run.describe()
        assert fake.checks_prefixes({"model": MODEL})
        assert fake.refused == []
        loop = main_requests(fake)
        assert len(valid_thinking(fake, loop[-1])) == FILES  # every block came back valid
        yield fake


# Claude Code's own prompt is about 19k tokens here: thresholds 3k to 15k above it compact
# every few turns, placeholders and a summary; each is set so that the run does not end on a
# compaction (which leaves no thinking before it valid, by the rule itself). The hidden
# rounds, kept in place, make those runs larger. With `extract_tool: after_compaction` (set
# here) the first compaction also adds the extract tool, rewriting that 19k-token prefix: it
# waits until a summary pays for that (about 44k tokens, whatever the threshold), and
# placeholders come at the next compactions, so its threshold is nearer the prompt. The
# cost-aware defaults compact sooner (patience 0.5, a summary once a quarter of what the last
# one removed has regrown, a tail of 1.5 % of the threshold), so the default's thresholds sit
# where its last compaction leaves three or more steps of valid thinking and the hidden
# round's thinking reaches a request (25,800 to 26,000 do; 25,600 and 26,200 end too soon
# after a compaction).
THRESHOLDS = {(None, False): 25_900, ("seed", False): 32_000, (None, True): 25_900}
THRESHOLDS[("seed", True)] = 34_000


def proxy_run(
    tmp_path: Path, compactor: str | None, extracts: int
) -> tuple[ClaudeRun, FakeMessages, ThinkingModel]:
    paths = write_files(tmp_path / "work", FILES, LINES)
    threshold = THRESHOLDS[(compactor, extracts > 0)]
    # The thresholds below were set for the tool joining with the first compaction.
    settings: dict[str, object] = {
        "compactor": compactor,
        "token_threshold": threshold,
        "extract_tool": "after_compaction",
    }
    if compactor == "seed":
        settings |= {"toolcall_keep_max": 4, "summary_keep_max": 8}
    with FakeMessages() as fake:
        fake.policy = model = ThinkingModel(paths, extracts=extracts)
        with UvicornThread(create_app(messages_settings(fake, **settings))) as proxy:
            run = claude_run(tmp_path, proxy.url)
        return run, fake, model


def run_checks(
    run: ClaudeRun, fake: FakeMessages, model: ThinkingModel, direct: FakeMessages
) -> Checks:
    checks = Checks()
    checks.check(
        "Claude Code finishes",
        run.returncode == 0 and run.result.get("result") == FINISHED,
        run.describe(),
    )
    refused = [f"{status}: {error['error']['message'][:90]}" for _, status, error in fake.refused]
    checks.check("no request is refused", refused == [], (len(refused), len(bodies(fake))))
    loop = main_requests(fake)
    checks.check("24+ tool steps", len(loop) > FILES, len(loop))
    placeholders = [sum(map(is_placeholder, tool_results(body))) for body in loop]
    checks.check("old tool results become placeholders", any(placeholders), placeholders)
    summaries = ["Last file read:" in "\n".join(system_texts(body)) for body in loop]
    checks.check("a summary reaches later requests", any(summaries), model.proxy_summaries)
    last = count_input_tokens(loop[-1]) if loop else 0
    direct_last = count_input_tokens(main_requests(direct)[-1])
    checks.check("the last request is at most 60% of the direct one", last <= 0.6 * direct_last)
    valid = valid_thinking(fake, loop[-1]) if loop else []
    checks.check("the last request carries 3+ valid thinking blocks", len(valid) >= 3, len(valid))
    checks.check("Claude Code did not compact by itself", model.own_compactions == 0)
    return checks


@pytest.mark.parametrize("compactor", [None, "seed"], ids=["default", "seed"])
def test_claude_code_thinking_through_the_proxy_is_never_refused(
    tmp_path: Path, compactor: str | None, direct: FakeMessages
) -> None:
    run, fake, model = proxy_run(tmp_path, compactor, extracts=0)
    run_checks(run, fake, model, direct).verify()


@pytest.mark.parametrize("compactor", [None, "seed"], ids=["default", "seed"])
def test_claude_code_thinking_after_a_hidden_extract_round(
    tmp_path: Path, compactor: str | None, direct: FakeMessages
) -> None:
    """The model calls the extract tool alone in a round, then thinks and reads on: that
    thinking goes up again, valid, in Claude Code's next request."""
    run, fake, model = proxy_run(tmp_path, compactor, extracts=2)
    checks = run_checks(run, fake, model, direct)
    loop = main_requests(fake)
    rounds = [pair for body in loop for pair in extract_rounds(body)]
    checks.check("the model called the extract tool", model.extracted != [], model.extracted)
    checks.check("the proxy answered it", rounds != [], len(rounds))
    checks.check("thinking followed a hidden round", model.after != [], model.after)
    valid = {text for body in loop for text in valid_thinking(fake, body)}
    lost = [text[:40] for text in model.after if text not in valid]
    checks.check("the thinking written after a hidden round stays valid", lost == [], lost)
    checks.verify()
