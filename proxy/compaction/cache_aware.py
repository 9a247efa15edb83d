"""A compaction strategy that decides when and how much by cost, prompt cache included.

It keeps the seed's mechanisms (reclaimed tool results behind placeholders, an eight-section
summary in the system message) and changes the decisions:

- budgets in tokens, not only counts: the newest tool results kept whole are bounded by a
  share of the threshold, the kept tail by a share and a fixed number of tokens, so one huge
  message cannot keep the prompt over;
- hysteresis: once it fires it compacts down to a target well below the threshold (at most
  `target_ratio` of it, in practice the preamble, the summary and a small tail), so the next
  compaction is many turns away;
- break-even: a compaction runs only when the tokens it removes, billed at the cached price
  over the expected remaining turns, outweigh re-sending the rewritten part uncached (written
  into the cache again at the model's cache-write price) plus the summary call; otherwise it
  waits, but never past the model's window (the hard ceiling);
- no loops: no new summary until the session grew by more than a quarter of what the last
  one removed (`regrow_share`; all of it made a session that crossed the threshold by less
  than its last crossing hover just under it, on level 1 alone);
- cold cache: after a pause longer than the provider keeps its prompt cache
  (`proxy.compaction.cache_life`), the request pays its whole prompt uncached anyway, so the
  rewrite is free (`Economics.cache_cold`) and a session waiting for break-even compacts then.

Pure: the summariser is injected, prices and history come in an `Economics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from proxy.compact import (
    CompactionAgent,
    CompactionReport,
    CompactorAbstract,
    ToolCallCompactResult,
    plan_cut,
)
from proxy.compaction.economics import Economics
from proxy.conversation import Conversation
from proxy.conversation_message import (
    RawOpenAIMessage,
    SystemPrompt,
    content_to_text,
    message_chars,
)
from proxy.session.history import HIDDEN_KEY_PREFIX
from proxy.trail import default_budget

SUMMARY_OUTPUT_TOKENS = 1024
SUMMARY_INSTRUCTION_TOKENS = 450
PLACEHOLDER_CHARS = 160


@dataclass
class Plan:
    """One way to compact, with its price."""

    level: Literal["toolcall", "summary"]
    reclaim: list[int]
    keep_recent: int | None
    removed: float
    rewrite: float
    summary_cost: float = 0.0
    after: float = 0.0

    def cost(self, econ: Economics) -> float:
        return econ.rewrite_cost(self.rewrite) + self.summary_cost

    def net(self, econ: Economics, horizon: float) -> float:
        return econ.saving_per_turn(self.removed) * horizon - self.cost(econ)


@dataclass
class _Sizes:
    """Token estimates per message: the known total spread over the measured characters."""

    conversation: Conversation
    total: int
    # Characters ahead of the messages that no compaction removes (`Economics.fixed_chars`).
    fixed_chars: int = 0
    tokens: list[float] = field(default_factory=list)
    per_char: float = 0.25
    fixed: float = 0.0  # their tokens

    def __post_init__(self) -> None:
        # A raw message's param is a copy of its dict: measure the dict, without the copy.
        chars = [
            message_chars(m.raw if type(m) is RawOpenAIMessage else m.completion_param())
            for m in self.conversation.messages
        ]
        self.per_char = self.total / max(1, sum(chars) + self.fixed_chars)
        self.tokens = [c * self.per_char for c in chars]
        self.fixed = self.fixed_chars * self.per_char

    def placeholder_tokens(self, index: int) -> float:
        return min(self.tokens[index], PLACEHOLDER_CHARS * self.per_char)


@dataclass
class CacheAwareCompactor(CompactorAbstract):
    """Compacts by cost; see the module docstring. `*_ratio` fields are shares of the threshold."""

    # The kept tail after a summary: the newest messages within min(tail_ratio x threshold,
    # tail_max_tokens), and never more than leaves the prompt at target_ratio x threshold.
    # Every later turn re-sends what a compaction keeps, so the per-turn cost grows with the
    # tail (BENCHMARKS.md section 5); the tail holds what the model needs to go on (the last
    # exchanges), which does not grow with the model's window.
    # 1.5 % of the threshold (3 %, and 8 % before): the tail is re-sent on every turn until
    # the next summary, and what it held is still one search or read away (the extract tool).
    target_ratio: float = 0.3
    tail_ratio: float = 0.015
    tail_max_tokens: int = 3000
    # The newest tool results kept whole at a reclaim: within 3 % of the threshold (5 %, and
    # 10 % before), and at most `toolcall_keep_max`.
    keep_tool_ratio: float = 0.03
    toolcall_keep_max: int = 12
    # Compact once the savings forgone while waiting reach this multiple of the cost: 1.0
    # is rent-or-buy's break-even (buy once the rent paid equals the price). 2.0 waited too
    # long once rewrites were priced in full (cache writes, the tools block of the first
    # compaction): sessions that ended soon after their compaction cost more than direct
    # (BENCHMARKS.md, "Cache-write prices"). 0.5: agent sessions that cross the threshold
    # go on for many turns more than their age foretells (the horizon), so half the price
    # earned is enough; over the corpus none costs more than direct at 1.25x writes, at
    # 16k, 32k or 64k, and prompt tokens fall 1.2 points further at 32k.
    patience: float = 0.5
    # Plans are compared by what they save over this many turns (at least), net of cost.
    min_horizon: float = 4.0
    # No loops: a new summary once the session regrew this share of what the last removed
    # (a quarter; half before: a session back over the threshold waited on level 1 alone).
    regrow_share: float = 0.25
    # The artifact trail's budget as a share of the threshold, within its 2,400 tokens (the
    # seed's compactor: 7.5 %, `proxy.trail.default_budget`). 4.5 %: the trail is re-sent
    # every turn until the next summary, and what it leaves out is one search away; at 3.75 %
    # fewer literals of the agents' next actions stayed visible or one read away (96.9 %).
    trail_ratio: float | None = 0.045
    shares_prefix: bool | None = None
    # Ask the proxy for summary requests that repeat the cached conversation (see Summarizer).
    summary_shares_prefix: ClassVar[bool] = True

    async def auto_compact(self, agent: CompactionAgent) -> CompactionReport:
        conv = agent.conversation
        conv.trail_budget = default_budget(agent.token_threshold, self.trail_ratio)
        total = conv.total_tokens
        report = CompactionReport("none", tokens_before=total, estimated_tokens_after=total)
        econ: Economics = getattr(agent, "economics", None) or Economics()
        chosen, sizes, econ.accrued = self._choose(agent, econ)
        if chosen is None or sizes is None:
            return report
        return await self._apply(chosen, agent, report, sizes)

    def would_compact(self, agent: CompactionAgent) -> bool:
        """Whether `auto_compact` would compact now, without compacting (no summary call).

        When it would wait, the agent's economics records the savings forgone this turn, as
        `auto_compact` would have. The proxy asks this before it takes the session's lease,
        so a session that waits never serialises its requests.
        """
        econ: Economics = getattr(agent, "economics", None) or Economics()
        chosen, _, accrued = self._choose(agent, econ)
        if chosen is None:
            econ.accrued = accrued
        return chosen is not None

    def _choose(
        self, agent: CompactionAgent, econ: Economics
    ) -> tuple[Plan | None, _Sizes | None, float]:
        """The plan to apply now (None: none yet), the sizes it was planned on, and the
        savings forgone by waiting after this turn."""
        conv = agent.conversation
        threshold = agent.token_threshold
        total = conv.total_tokens
        if total is None or total <= threshold:
            return None, None, econ.accrued
        sizes = _Sizes(conv, total, econ.fixed_chars)
        forced = total >= econ.ceiling()
        reclaim = self._reclaim_plan(sizes, threshold, econ)
        plans: list[Plan] = [reclaim]
        if forced or econ.may_summarize(total, self.regrow_share):
            summary = self._summary_plan(sizes, threshold, reclaim, agent, econ)
            if summary is not None:
                plans.append(summary)
        useful = [p for p in plans if p.removed > 0]
        if not useful:
            return None, sizes, econ.accrued
        if forced:
            return min(useful, key=lambda p: p.after), sizes, 0.0
        # The plan that would pay back the most over the coming turns (the session's age is
        # the best guess of its future), then wait until it has earned its price.
        horizon = max(self.min_horizon, float(econ.turns))
        chosen = max(useful, key=lambda p: p.net(econ, horizon))
        earned = econ.accrued + econ.saving_per_turn(chosen.removed)
        if earned < self.patience * chosen.cost(econ):
            return None, sizes, earned  # not worth it yet: the cache is cheaper than a rewrite
        return chosen, sizes, 0.0

    def _tool_indices(self, conv: Conversation, keep: dict[str, str]) -> list[int]:
        if not conv.toolcall_enabled:
            return []
        return [
            i
            for i, m in enumerate(conv.messages)
            if isinstance(m, RawOpenAIMessage)
            and m.key is not None  # the cheapest test first: most messages have no key
            and m.role == "tool"
            and keep.get(m.key) != "keep"  # learned: the model reads these back
            and not content_to_text(m.content).startswith("[Compacted, ID: ")
        ]

    def _reclaim_plan(self, sizes: _Sizes, threshold: int, econ: Economics) -> Plan:
        conv = sizes.conversation
        policy = econ.reclaim_policy
        candidates = self._tool_indices(conv, policy)
        protected: set[int] = set()
        budget = threshold * self.keep_tool_ratio
        used = count = 0.0
        for i in reversed(candidates):
            # A doubled tool's results (`proxy.session.asked_back`) count half: twice as many stay.
            key = getattr(conv.messages[i], "key", None)
            if (key or "").startswith(HIDDEN_KEY_PREFIX):
                continue  # the proxy's own answers, acted on already: reclaimed first
            weight = 0.5 if policy and policy.get(key or "") == "double" else 1.0
            if protected and (
                count + weight > self.toolcall_keep_max or used + sizes.tokens[i] * weight > budget
            ):
                break
            protected.add(i)
            used += sizes.tokens[i] * weight
            count += weight
        reclaim = [i for i in candidates if i not in protected]
        removed = sum(sizes.tokens[i] - sizes.placeholder_tokens(i) for i in reclaim)
        rewrite = sum(sizes.tokens[reclaim[0] :]) - removed if reclaim else 0.0
        if reclaim and econ.rewrites_all:
            rewrite = sizes.total - removed
        return Plan("toolcall", reclaim, None, removed, rewrite, after=sizes.total - removed)

    def _summary_plan(
        self,
        sizes: _Sizes,
        threshold: int,
        reclaim: Plan,
        agent: CompactionAgent,
        econ: Economics,
    ) -> Plan | None:
        conv = sizes.conversation
        tokens = list(sizes.tokens)
        for i in reclaim.reclaim:
            tokens[i] = sizes.placeholder_tokens(i)
        roles = [m.role for m in conv.messages]
        preamble_tokens = 0.0
        for i, role in enumerate(roles):
            if role not in ("system", "developer"):
                break
            preamble_tokens += tokens[i]
        room = threshold * self.target_ratio - preamble_tokens - SUMMARY_OUTPUT_TOKENS
        budget = max(0.0, min(threshold * self.tail_ratio, self.tail_max_tokens, room))
        keep, used = 0, 0.0
        for i in range(len(roles) - 1, -1, -1):
            if roles[i] == "system" and isinstance(conv.messages[i], SystemPrompt):
                break
            if keep and used + tokens[i] > budget:
                break
            keep += 1
            used += tokens[i]
        cut = plan_cut(roles, keep)
        if cut is None:
            return None
        kept = set(cut.kept_indices(len(roles)))
        preamble = set(range(cut.preamble))
        after = sum(tokens[i] for i in kept | preamble) + SUMMARY_OUTPUT_TOKENS + sizes.fixed
        shares = self.shares_prefix
        if shares is None:
            shares = bool(getattr(agent.summarize, "shares_prefix", False))
        # The summary request repeats the cached conversation (or sends the summarised part
        # uncached); what it sends uncached is written into the cache at the write price.
        if shares:
            summary_prompt = sizes.total * econ.price_now
        else:
            summary_prompt = sum(tokens[i] for i in cut.summarized_indices()) * econ.write_price
        instruction = SUMMARY_INSTRUCTION_TOKENS * econ.write_price
        summary_cost = summary_prompt + instruction + SUMMARY_OUTPUT_TOKENS
        return Plan(
            "summary",
            reclaim.reclaim,
            keep,
            removed=sizes.total - after,
            # The tools block stays cached unless this compaction adds the proxy's tool.
            rewrite=after if econ.rewrites_all else after - sizes.fixed,
            summary_cost=summary_cost,
            after=after,
        )

    async def _apply(
        self, plan: Plan, agent: CompactionAgent, report: CompactionReport, sizes: _Sizes
    ) -> CompactionReport:
        conv = sizes.conversation
        before_len = conv.estimated_message_length()
        keys = [k for i in plan.reclaim if (k := getattr(conv.messages[i], "key", None))]
        count = conv.reclaim(keys)
        conv.compaction_counter.toolcall_reclaimed += count
        fraction = (before_len - conv.estimated_message_length()) / before_len if before_len else 0
        report.toolcall_results.append(ToolCallCompactResult(count, fraction))
        if count:
            report.level = "toolcall"
            conv.compaction_counter.toolcall_rounds += 1
        estimate = int(
            sizes.total - sum(sizes.tokens[i] - sizes.placeholder_tokens(i) for i in plan.reclaim)
        )
        if plan.level == "summary" and plan.keep_recent is not None:
            result = await conv.acompact(agent.summarize, plan.keep_recent)
            report.summary_results.append(result)
            if result.ok:
                report.level = "summary"
                estimate = int(plan.after)
        conv.total_tokens = None if report.level == "summary" else estimate
        report.estimated_tokens_after = estimate
        return report
