"""One compaction of a turn's session (`proxy.turn.session_turn.Turn.compact`): the compactor
asked whether it would act (before the lease is taken), then run under the lease with a
summariser, its report applied to the session's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.compact import CompactionContext, CompactorAbstract
from proxy.compaction.economics import Economics
from proxy.compaction.summarizer import PostFn, Summarizer
from proxy.session import asked_back
from proxy.session.rebuild import Rebuild, apply_compaction, cover
from proxy.session.state import SessionState

if TYPE_CHECKING:
    from proxy.turn.session_turn import Turn

log = logging.getLogger("proxy.turn")


def would_compact(
    turn: Turn,
    compactor: CompactorAbstract,
    threshold: int,
    force_tokens: int | None,
    summary_model: str | None,
    economics: Callable[[], Economics | None] | None,
) -> bool:
    """Ask a compactor that can tell (`would_compact`) whether it would act on the state
    as loaded; when it would wait, keep what it noted (the savings forgone) as `run`
    would. Compactors that cannot tell are always run, under the lease.
    """
    asks = getattr(compactor, "would_compact", None)
    if asks is None:
        return True
    assert turn.rb is not None
    rb = turn.rb
    conv = rb.conversation
    before = conv.total_tokens
    conv.total_tokens = turn.over(threshold, force_tokens)
    shared = getattr(compactor, "summary_shares_prefix", False) and not summary_model
    econ = learned(turn, economics() if economics is not None else None)
    agent = CompactionContext(
        conversation=conv,
        summarize=_NoSummary(shares_prefix=shared),
        token_threshold=threshold,
        economics=econ,
    )
    try:
        acts = bool(asks(agent))
    except Exception:  # let the compaction itself run (and fail) under the lease
        log.exception("asking the compactor failed")
        return True
    finally:
        conv.total_tokens = before
    if not acts and econ is not None:
        rb.state.accrued = econ.accrued
    return acts


async def run(
    turn: Turn,
    compactor: CompactorAbstract,
    projected: int,
    threshold: int,
    post: PostFn,
    summary_model: str | None,
    economics: Economics | None = None,
) -> None:
    assert turn.rb is not None
    rb = turn.rb
    conv = rb.conversation
    conv.total_tokens = projected
    shared = getattr(compactor, "summary_shares_prefix", False) and not summary_model
    turn.summarizer = Summarizer(
        post=post,
        model=summary_model or str(turn.body.get("model") or ""),
        tools=turn.upstream_tools() if shared else turn.summary_tools(),
        # Same model, same tools, same messages as the request about to be sent: the
        # provider serves the summary request from the prompt cache.
        prefix=rb.upstream_messages() if shared else None,
    )
    summarize: Any = turn.summarizer
    if turn.ahead is not None:  # only a request over the window waits for a summary
        ceiling = (economics or Economics()).ceiling()
        summarize = turn.ahead.wrap(rb, turn.summarizer, must_wait=projected >= ceiling)
    agent = CompactionContext(
        conversation=conv,
        summarize=summarize,
        token_threshold=threshold,
        economics=learned(turn, economics),
    )
    before = set(rb.state.reclaimed)
    try:
        report = await compactor.auto_compact(agent)
    except Exception:
        log.exception("compaction failed, sending uncompacted")
        state = SessionState.from_bytes(rb.state.to_bytes())
        turn.rb = turn.rebuild_from(state)
        turn.compaction = "failed"
        return
    if turn.ahead is not None and turn.ahead.settle(rb, report, projected):
        # The summary is still being written: go up as without compacting.
        turn.rb = turn.rebuild_from(SessionState.from_bytes(rb.state.to_bytes()))
        return
    apply_compaction(rb)
    count_reclaimed(rb, before)
    turn.reports.append(report.to_dict())
    if economics is not None:
        rb.state.accrued = economics.accrued
    if report.level == "summary" and report.estimated_tokens_after is not None:
        rb.state.size_after_summary = report.estimated_tokens_after
        rb.state.removed_by_summary = max(0, projected - report.estimated_tokens_after)
    if report.level != "none":
        turn.compaction = (
            report.level if turn.compaction in ("none", "toolcall") else turn.compaction
        )
        state = rb.state
        state.last_compaction = report.to_dict()
        # The state now describes this request's messages at their compacted size, so a
        # request of the same history that reads it does not compact again.
        cover(rb)
        state.total_tokens = conv.total_tokens


def learned(turn: Turn, econ: Economics | None) -> Economics | None:
    """The session's costs with what level 1 learned from its model's look-backs
    (`proxy.session.asked_back`; `auto_compact.adaptive_reclaim`)."""
    rb = turn.rb
    if econ is not None and rb is not None and turn.learn and rb.state.lookback:
        econ.reclaim_policy = asked_back.learned(rb.state.lookback, rb.messages, lambda: rb.keys)
    return econ


def count_reclaimed(rb: Rebuild, before: set[str]) -> None:
    """Count the results this compaction reclaimed by their tool."""
    new = [k for k in rb.state.reclaimed if k not in before]
    if new:
        counts = asked_back.Counts(rb.state.lookback, rb.state.searches)
        names = asked_back.names_by_key(rb.messages, rb.keys)
        asked_back.count_reclaimed(counts, names, new)


@dataclass(frozen=True)
class _NoSummary:
    """The summariser while a compactor is only asked whether it would compact."""

    shares_prefix: bool = False

    async def __call__(self, messages: list[dict[str, Any]]) -> str | None:
        return None
