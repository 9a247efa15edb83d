"""Escalation after a context-length refusal, and the calibration of the proxy's estimates.

Real tokenizers, chat templates, images and tool schemas make any size estimate differ from
the bill, so a request the proxy thought would fit can still be refused. The seed's retry
rules intend what this module lays out as a ladder: level 1, then level 2, then level 2 with
the keep counts halved (`max_retries` times), each step forced whatever the estimate says.
The pipeline climbs it one step at a time and sends again only once a step removed at least
what the refusal said was missing, measured in the upstream's own tokens: each session keeps
the ratio of what its upstream billed for a prompt to the proxy's estimate of it
(`calibrate`), and projections and this check scale estimates by it. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.compact import CompactionAgent, CompactionReport, CompactorAbstract
from proxy.session.state import SessionState


@dataclass
class ForcedToolcall(CompactorAbstract):
    """Level 1 only, whatever the estimate: reclaim all but the newest `keep` results."""

    keep: int

    async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
        conv = agent.conversation
        report = CompactionReport("none", tokens_before=conv.total_tokens)
        result = conv.compact_toolcall(keep_max=self.keep)
        report.toolcall_results.append(result)
        if result.reclaimed_count:
            conv.compaction_counter.toolcall_rounds += 1
            report.level = "toolcall"
        # The size this step was forced at is no measure of anything: the next turn projects
        # from its own estimate until the upstream reports the real size again.
        conv.total_tokens = None
        return report


@dataclass
class ForcedSummary(CompactorAbstract):
    """Level 1 then level 2, whatever the estimate, keeping the newest `keep` messages."""

    tool_keep: int
    keep: int

    async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
        report = await ForcedToolcall(self.tool_keep).auto_compact(agent)
        summary = await agent.conversation.acompact(agent.summarize, self.keep)
        report.summary_results.append(summary)
        if summary.ok:
            report.level = "summary"
        return report


def ladder(toolcall_keep: int, summary_keep: int, max_retries: int) -> list[CompactorAbstract]:
    """The steps, mildest first: level 1, level 2, then level 2 with halved keep counts
    (down to 1 tool result and 2 messages: the last exchange)."""
    steps: list[CompactorAbstract] = [
        ForcedToolcall(toolcall_keep),
        ForcedSummary(toolcall_keep, summary_keep),
    ]
    tool_keep, keep = toolcall_keep, summary_keep
    for _ in range(max_retries):
        tool_keep, keep = max(1, tool_keep // 2), max(2, keep // 2)
        steps.append(ForcedSummary(tool_keep, keep))
    return steps


CALIBRATION_BOUNDS = (0.25, 4.0)


def calibrate(state: SessionState, billed: int, estimated: int) -> None:
    """Fold one turn's billed prompt tokens against the proxy's estimate of that prompt into
    the session's running ratio (`SessionState.calibration`), bounded so one odd turn (a
    cached or truncated prompt) cannot swing it far."""
    if billed <= 0 or estimated <= 0:
        return
    low, high = CALIBRATION_BOUNDS
    observed = min(high, max(low, billed / estimated))
    previous = state.calibration
    state.calibration = round(observed if previous is None else (previous + observed) / 2, 4)


def calibrated(estimate: int, ratio: float | None) -> int:
    """An estimate in the proxy's units as the upstream would bill it."""
    return estimate if ratio is None else int(estimate * ratio)
