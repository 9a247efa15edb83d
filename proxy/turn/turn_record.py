"""A finished turn's record (`proxy.turn.pipeline.Pipeline.finish`): the proxy's extract rounds
kept for later requests, the usage recorded and calibrated, the savings counted, the state
saved; and what happened, in the request's log fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.compaction.escalation import calibrate as calibrate_state
from proxy.session.hidden_rounds import extract_calls, round_entry
from proxy.session.rebuild import Rebuild, record_turn
from proxy.session.state import add_round
from proxy.trail import counts as trail_counts
from proxy.turn import billing, summary_ahead
from proxy.wire.base import Usage

if TYPE_CHECKING:
    from proxy.turn.pipeline import Pipeline


def calibrate(p: Pipeline, sent: int) -> None:
    """Update the session's ratio of billed to estimated prompt tokens (`sent`: the
    estimate of the messages sent)."""
    rb = p.turn.rb
    if rb is None or not p.first_prompt:
        return
    tools = billing.tools_tokens(p.wire.tools(p.client_body))
    calibrate_state(rb.state, p.first_prompt, sent + tools)


async def record(p: Pipeline, rb: Rebuild, usage: Usage | None) -> None:
    """Keep the turn's extract rounds, record its usage and savings, and queue the save."""
    rb.state.wire = p.wire.name  # for the admin API, the viewer and the CLI
    for rnd, results in p.continuations:  # later requests carry them again
        message, shown = p.wire.hidden_round(p.client_body, rnd, stream=p.stream)
        scopes = p.answered.scopes(extract_calls(rnd.message))
        add_round(rb.state, len(rb.messages), round_entry(message, shown, results, scopes))
    needed = p.first_prompt or usage is not None
    sent = rb.sent_estimate() if needed else 0  # once: it may rebuild the messages
    calibrate(p, sent)
    looked = p.turn.looked.settle(rb.state, p.request.state)
    if usage is not None:
        summary_ahead.bill_used(p.turn.ahead, p.measure)
        saved = p.measure.record(rb, p.wire, p.client_body, injected=p.turn.injected, sent=sent)
        ahead = summary_ahead.fields(p.turn.ahead, p.cache_cold())
        record_turn(
            rb,
            total_tokens=usage.total,
            prompt_tokens=usage.prompt,
            cached_tokens=usage.cached,
            written_tokens=usage.written,
            compaction=p.turn.compaction,
            extra={"savings": saved, **ahead} | looked,
            now=p.arrived,
        )
        vec = billing.count(rb, saved)
        if vec is not None:
            prices = getattr(p.request.app.state, "prices", None)
            p.log_fields["savings"] = billing.log_fields(saved["model"], vec, prices)
    await p.turn.save(wait=False)
    summary_ahead.after_turn(p)  # the session's next summary, written in the background


def note_fields(p: Pipeline, rb: Rebuild | None, usage: Usage | None) -> None:
    """What the turn did, in the request's log fields (for the logs and the metrics)."""
    report = p.turn.reports[-1] if p.turn.reports else {}
    p.log_fields.update(
        session=p.turn.key.id[:12],
        tenant=p.turn.key.tenant[:8],
        model=p.client_body.get("model"),
        upstream_ms=round(p.upstream_ms, 2),
        compaction=p.turn.compaction,
        prompt_tokens=usage.prompt if usage is not None else None,
        tokens_before=report.get("tokens_before"),
        tokens_after=report.get("estimated_tokens_after"),
        summary_calls=p.turn.summarizer.calls if p.turn.summarizer else 0,
        extract_calls=p.extract_calls,
        degraded=p.turn.degraded,
        store_errors=p.turn.store_errors,
        lease=p.turn.lease,  # how the compaction lease went (session_turn.Turn.lease)
        trail_entries=trail_counts(rb.state.trail)
        if rb is not None and p.turn.compaction == "summary"
        else None,
    )
