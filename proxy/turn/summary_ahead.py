"""Summaries prepared ahead, so no turn waits for one (issue 28): when a summary is written
and how many at once. The background job itself is `proxy.turn.summary_ahead_job`.

A summary is a full model call over most of the session, seconds to a minute on a real model;
made inside the turn that crosses the strategy's point, that turn waits for it. Here:

- Once a turn's answer is out (`TurnAhead.after_turn`, from the pipeline's `finish`), when the
  session's growth per turn says the strategy will summarise within the next few turns (it
  is asked on the projected sizes, `proxy.compaction.crossing`), the summary is written in the
  background: the crossing turn's request (the conversation as just sent, the same model and
  tools, so it reads the prompt cache this turn wrote) over the client's messages so far.
- The crossing turn uses it if those messages still begin what the client sent
  (`AheadSummarizer`; the cut keeps whatever the summary does not cover). An edit, retry or
  branch before their end makes it stale: it is dropped and counted. Not ready yet: the turn
  goes upstream as it would have without compacting, and the summary joins a later turn.
  Only a request that would not fit the model's window without one waits, as before.
- Bounded: one summary in flight per session in a process (`AheadTasks`; across replicas,
  the job's lease); across sessions, a share of the upstream connections, and never one a
  client's request could have had; after a failure, the session's tries are spaced out
  (`proxy.turn.summary_ahead_limits`). One never used is counted (the turn record and
  `xun_summary_ahead_total{outcome="unused"}`). A failure is logged and costs the client
  nothing. At shutdown the summaries in flight are dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from proxy.compact import CompactionContext, CompactionReport, CompactorAbstract
from proxy.compaction.crossing import (
    AheadSummarizer,
    WouldSummarise,
    growth_per_turn,
    lead_turns,
    projections,
    turn_interval,
)
from proxy.compaction.economics import Economics
from proxy.compaction.summarizer import Summarizer
from proxy.conversation_message import SystemPrompt
from proxy.errors import ServiceUnavailable
from proxy.session.prepared import Prepared, base_of
from proxy.session.rebuild import Rebuild, rebuild
from proxy.session.state import SessionState
from proxy.session.turn_log import decode
from proxy.turn.billing import Measure
from proxy.turn.summary_ahead_job import Job, prepare
from proxy.turn.summary_ahead_limits import AheadTasks
from proxy.wire.base import Usage

log = logging.getLogger("proxy.ahead")

# A summary the model is known to write faster than this is not prepared ahead: the crossing
# turn waits about that long for it, and no summary is paid for that a session ending before
# its crossing (or a strategy waiting past it) never uses. The token economy's replay lost
# 1-6 % on two trajectories to such unused summaries.
QUICK_SUMMARY_SECONDS = 1.0

POOL_FULL = "upstream_pool_exhausted"


class Pipeline(Protocol):
    """What preparing a summary needs of the request that finished (`proxy.turn.pipeline`)."""

    turn: Any
    compactor: CompactorAbstract
    log_fields: dict[str, Any]
    settings: Any
    client_body: dict[str, Any]

    async def post_summary(
        self,
        chat_body: dict[str, Any],
        bill: Callable[[Usage | None], None] | None = None,
        *,
        background: bool = False,
    ) -> dict[str, Any]: ...
    def summary_model(self) -> str | None: ...
    def threshold(self) -> int: ...
    def compaction_enabled(self) -> bool: ...
    def economics(self, *, force: bool = False) -> Economics | None: ...


@dataclass
class Probe:
    """What asking the strategy about the next turns needs, taken while the turn is whole."""

    compactor: CompactorAbstract
    history: Any
    state: SessionState
    hashed: tuple[Any, Any]
    unmerge: Any
    level1: bool
    sizes: list[int]
    threshold: int
    economics: Economics | None
    shares_prefix: bool


class TurnAhead:
    """One request's part: the check at load, the crossing's summariser, the turn's end."""

    def __init__(self, tasks: AheadTasks) -> None:
        self.tasks = tasks
        self.events: list[str] = []
        self.summarizer: AheadSummarizer | None = None
        self.length_before = 0
        self.bill: list[int] = []  # what the summary this turn used was billed

    @classmethod
    def of(cls, app_state: Any) -> TurnAhead | None:
        """A request's part, when the app writes summaries ahead (`summary_ahead`)."""
        tasks = getattr(app_state, "ahead", None)
        if not isinstance(tasks, AheadTasks) or not app_state.settings.summary_ahead:
            return None
        return cls(tasks)

    @property
    def record(self) -> str | None:
        """What this turn did with summaries written ahead (the turn record, the log)."""
        return ",".join(self.events) or None

    def note(self, outcome: str) -> None:
        self.events.append(outcome)
        self.tasks.count(outcome)

    def check(self, rb: Rebuild | None) -> None:
        """Drop a prepared summary this request shows stale (counted as unused)."""
        if rb is None or rb.state.ahead is None:
            return
        prepared = Prepared.of(rb.state.ahead)
        if prepared is None or not prepared.fits(rb.state, rb.chain):
            rb.state.ahead = None
            self.note("unused")
        else:
            rb.state.ahead = prepared.vouch(rb.chain)  # the next turn need not hash it all

    def wrap(self, rb: Rebuild, inner: Summarizer, *, must_wait: bool) -> AheadSummarizer:
        """The crossing turn's summariser: the prepared summary when it fits this request."""
        self.check(rb)  # the state may have been re-read under the lease
        prepared = Prepared.of(rb.state.ahead)
        text, limit = None, None
        if prepared is not None:
            conv, origin = rb.conversation, rb.origin
            limit = len(conv.messages)
            for i, message in enumerate(conv.messages):
                source = origin.get(id(message))
                if source is not None and source >= prepared.covers:
                    limit = i
                    break
            text = prepared.summary
            self.length_before = conv.estimated_message_length()
        self.summarizer = AheadSummarizer(inner, text, limit, must_wait=must_wait)
        return self.summarizer

    def settle(self, rb: Rebuild, report: CompactionReport, projected: int) -> bool:
        """After the strategy ran: True when it wanted a summary that is not ready (the
        request then goes up as it would have without compacting)."""
        wrapper = self.summarizer
        if wrapper is None:
            return False
        if wrapper.used:
            after = rb.conversation.estimated_message_length()
            if report.level == "summary" and self.length_before:
                # The cut kept what the summary does not cover: more than the strategy planned.
                report.estimated_tokens_after = int(projected * after / self.length_before)
            prepared = Prepared.of(rb.state.ahead)
            rb.state.ahead = None
            if prepared is not None:
                rb.state.ahead_seconds = prepared.seconds
                self.bill = prepared.billed  # counted in this turn's savings (`bill_used`)
            self.note("used")
            return False
        if wrapper.deferred:
            self.note("waiting")
            return True
        return False

    def after_turn(self, p: Pipeline) -> None:
        """Once the answer is out: start the session's next summary if it is near."""
        turn = p.turn
        rb: Rebuild | None = turn.rb
        if rb is None or turn.degraded or turn.compaction in ("summary", "failed"):
            return
        if not p.compaction_enabled() or self.tasks.busy(turn.key.id):
            return
        state = rb.state
        prepared = Prepared.of(state.ahead)
        if prepared is not None and prepared.fits(state, rb.chain):
            return  # one is ready for the crossing
        if self.tasks.backoff.wait(turn.key.id):
            self.tasks.count("backoff")  # the last tries failed: this turn does not try
            return
        waiting = self.summarizer is not None and self.summarizer.deferred
        probe = None if waiting else self._probe(p, rb)
        if not waiting and probe is None:
            return
        job = self._job(p, rb)
        self.tasks.start(turn.key.id, _run(job, probe))

    def _probe(self, p: Pipeline, rb: Rebuild) -> Probe | None:
        """The sizes of the next turns, when one of them goes over the threshold."""
        state = rb.state
        if state.total_tokens is None:
            return None
        lines = state.turn_log.last_lines(8)
        records = [r for r in map(decode, lines) if r is not None]
        growth = growth_per_turn(records)
        if growth is None:
            return None
        took = state.ahead_seconds or self.tasks.seconds.get(self._model(p))
        if took is not None and took < QUICK_SUMMARY_SECONDS:
            return None  # the crossing turn writes it, hardly waiting: nothing is risked on it
        lead = lead_turns(took, turn_interval(records))
        threshold = p.threshold()
        sizes = [s for s in projections(state.total_tokens, growth, lead) if s > threshold]
        if not sizes:
            return None
        turn = p.turn
        return Probe(
            compactor=p.compactor,
            history=turn.history,
            state=replace(state, view=None, hidden=list(state.hidden)),
            hashed=turn.hashed(),
            unmerge=turn.wire.unmerge,
            level1=rb.level1,
            sizes=sizes,
            threshold=threshold,
            economics=p.economics(),
            shares_prefix=self._shares(p),
        )

    def _model(self, p: Pipeline) -> str:
        return str(p.summary_model() or p.client_body.get("model") or "")

    def _shares(self, p: Pipeline) -> bool:
        """As the crossing turn's request would: the session's cached prefix repeated, unless
        the summary goes to another model (or another upstream)."""
        shares = getattr(p.compactor, "summary_shares_prefix", False)
        return bool(shares) and not p.summary_model()

    def _job(self, p: Pipeline, rb: Rebuild) -> Job:
        """The summary request as the crossing turn would make it, over this turn's messages."""
        turn = p.turn
        shared = self._shares(p)
        bills: list[Usage | None] = []
        summarizer = Summarizer(
            post=lambda body: p.post_summary(body, bills.append, background=True),
            model=self._model(p),
            tools=turn.upstream_tools() if shared else turn.summary_tools(),
            prefix=rb.upstream_messages() if shared else None,  # as sent: read from the cache
        )
        conv = rb.conversation
        request: list[dict[str, Any]] = []
        system = conv.system_prompt
        if system is not None and system.content:
            request.append({"role": "system", "content": system.text(with_sections=False)})
        request += [m.completion_param() for m in conv.messages if not isinstance(m, SystemPrompt)]
        covers = len(rb.messages)
        prepared = Prepared("", covers, rb.chain.prefix(covers), base_of(rb.state), 0.0)
        return Job(turn.key, turn.store, summarizer, request, prepared, self.tasks, bills)


def fields(ahead: TurnAhead | None, cache_cold: bool) -> dict[str, Any]:
    """The turn record's fields besides its savings: `cache_cold` when the prompt cache had
    gone cold, and what the turn did with a summary prepared ahead (`summary_ahead`)."""
    record = ahead.record if ahead is not None else None
    return {
        **({"cache_cold": True} if cache_cold else {}),
        **({} if record is None else {"summary_ahead": record}),
    }


def bill_used(ahead: TurnAhead | None, measure: Measure) -> None:
    """What the summary written ahead that this turn used was billed joins its savings, once."""
    if ahead is not None and len(ahead.bill) == 4:
        prompt, cached, written, output = ahead.bill
        measure.summary(Usage(prompt=prompt, cached=cached, written=written, output=output))
        ahead.bill = []


def after_turn(p: Pipeline) -> None:
    """Once a turn's answer is out (`TurnAhead.after_turn`); never the client's problem."""
    ahead = p.turn.ahead
    if ahead is None:
        return
    try:
        ahead.after_turn(p)
    except Exception:
        log.exception("starting a summary ahead failed")
    p.log_fields["summary_ahead"] = ahead.record


async def near(probe: Probe) -> bool:
    """Whether the strategy would summarise at one of the projected sizes."""
    econ = probe.economics
    for size in probe.sizes:
        state = replace(probe.state, hidden=list(probe.state.hidden))
        received, written = probe.hashed
        rb = rebuild(probe.history, state, written, received, probe.unmerge)
        rb.level1 = probe.level1
        conv = rb.conversation
        conv.total_tokens = size
        asked = WouldSummarise(shares_prefix=probe.shares_prefix)
        agent = CompactionContext(conv, asked, probe.threshold, econ)
        report = await probe.compactor.auto_compact(agent)
        if asked.asked:
            return True
        if report.level != "none":
            return False  # it would reclaim tool results first: look again after that
    return False


async def _run(job: Job, probe: Probe | None) -> None:
    try:
        if probe is not None and not await near(probe):
            return
        if not job.tasks.share.take():
            job.count("deferred")  # as many as the share allows wait on the upstream
            return
        try:
            job.count("started")
            await prepare(job)
        finally:
            job.tasks.share.give()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if isinstance(exc, ServiceUnavailable) and exc.code == POOL_FULL:
            job.count("deferred")  # no upstream connection free: the clients' requests first
            return
        log.exception("preparing a summary ahead failed")
        job.count("failed")
