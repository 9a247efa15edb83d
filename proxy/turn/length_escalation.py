"""After an upstream's context-length refusal: compact harder, one step of the escalation
ladder (`proxy.compaction.escalation`) at a time, until the request is worth sending again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.compaction.escalation import calibrated, ladder
from proxy.wire.refusal import missing_tokens, window_of

if TYPE_CHECKING:
    from proxy.turn.pipeline import Pipeline


async def escalate(p: Pipeline, error_body: Any) -> bool:
    """Step down the ladder until a step removed at least what the refusal said was missing;
    True when the request is worth sending again."""
    rb = p.turn.rb
    if rb is None or not p.compaction_enabled() or p.turn.degraded:
        return False
    window = window_of(error_body)
    if window:
        rb.state.context_window = window
    missing = missing_tokens(error_body)
    threshold = p.threshold()
    removed = 0
    if p.ladder is None:
        settings = p.settings
        p.ladder = ladder(
            settings.toolcall_keep_max, settings.summary_keep_max, settings.max_retries
        )
    while p.rung < len(p.ladder):
        step = p.ladder[p.rung]
        p.rung += 1
        before = rb.conversation.estimated_message_length()
        await p.prepare(force_tokens=max(threshold * 2, 1), threshold=threshold, step=step)
        if p.turn.rb is None:
            return False
        rb = p.turn.rb
        removed += max(0, before - rb.conversation.estimated_message_length())
        gained = calibrated(removed // 4, rb.state.calibration)
        if removed and (missing is None or gained >= missing):
            return True
    return False
