"""A turn's savings, measured where the turn ends (`proxy.turn.pipeline.Pipeline.finish`).

`Measure` collects what each upstream call of the request was billed (its rounds, the
summary calls of its compaction); `record` turns it into the turn record's `savings`
(`proxy.session.savings_record`), `count` adds the record to the session's running totals, and
`log_fields` is what the request's log line and the Prometheus counters read.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.compaction.prices import Prices
from proxy.session import savings_record
from proxy.session.rebuild import Rebuild
from proxy.session.savings_record import Tokens
from proxy.wire.base import JSON, Usage, Wire


def tools_tokens(tools: Any) -> int:
    """The proxy's estimate of a tools block (the calibration's, the savings', shadow's)."""
    if not tools:
        return 0
    try:
        return len(orjson.dumps(tools)) // 4
    except TypeError:
        return 0


def client_estimate(rb: Rebuild, tools: Any) -> int:
    """The proxy's estimate of the client's own request: its messages and its tools."""
    return (rb.chars + 3) // 4 + 4 * len(rb.messages) + tools_tokens(tools)


class Measure:
    """The billed calls of one request."""

    def __init__(self) -> None:
        self.rounds: list[Tokens] = []
        self.summaries: list[Tokens] = []

    def round(self, usage: Usage | None) -> None:
        self.rounds.append(Tokens.of(usage))

    def summary(self, usage: Usage | None) -> None:
        self.summaries.append(Tokens.of(usage))

    def record(
        self, rb: Rebuild, wire: Wire, body: JSON, *, injected: bool, sent: int
    ) -> dict[str, Any]:
        """The turn's `savings`; call before the turn is recorded (the state still holds the
        previous turn's prefix). `sent`: the estimate of the messages sent upstream."""
        state = rb.state
        tools = wire.tools(body)
        client = client_estimate(rb, tools)
        sent_tools = wire.with_extract_tool(tools) if injected else tools
        sent += tools_tokens(sent_tools)
        first = self.rounds[0].prompt if self.rounds else None
        direct = savings_record.direct_estimate(
            client, sent_estimate=sent, billed=first, calibration=state.calibration
        )
        cached_before = any(len(v) > 2 and v[2] for v in state.savings.values())
        return savings_record.turn_savings(
            str(body.get("model") or ""),
            self.rounds,
            self.summaries,
            direct,
            previous_direct=state.direct_last,
            appended=rb.reset_reason is None and rb.new_from > 0,
            caches=cached_before or any(r.cached for r in self.rounds),
        )


def shadow_record(model: str, usage: Usage | None, estimate: int) -> dict[str, Any]:
    """A shadow turn's `savings`: its request went upstream as the client sent it, so what it
    was billed is the direct side (the proxy's calibrated `estimate` when the answer carried
    no usage); the projection is in the record's `projected_prompt_tokens`."""
    billed = Tokens.of(usage)
    direct = billed.prompt or estimate
    return {
        "model": model,
        "sent": [billed.prompt, billed.cached, billed.written],
        "direct": [direct, billed.cached, billed.written],
    }


def count(rb: Rebuild, record: dict[str, Any]) -> list[int] | None:
    """Add the turn just recorded (the turn log's last record: a shadow turn's marks
    included) to the session's totals; its vector."""
    state = rb.state
    last = state.turn_log.last()
    if last is None or not isinstance(last.get("savings"), dict):
        return None
    state.direct_last = int(record["direct"][0])
    return savings_record.fold(state.savings, last)


def log_fields(model: str, vec: list[int], prices: Prices | None) -> dict[str, Any]:
    """The request's savings for its log line and the metrics: tokens, money when priced, and
    the model as a price-table entry (a small vocabulary, fit for a label)."""
    tally = savings_record.Tally()
    price_of = prices if prices is not None else (lambda _: None)
    tally.add(model, vec, price_of)
    totals = tally.totals()
    shadow = bool(vec[savings_record.INDEX["shadow_requests"]])
    return {
        "model": (prices.entry(model) if prices is not None else None) or "other",
        "shadow": shadow,
        "sent": totals["prompt_tokens_sent"],
        "direct": totals["prompt_tokens_direct"],
        "saved": totals["tokens_saved"],
        "cost_sent": totals["cost_sent"],
        "cost_direct": totals["cost_direct"],
        "cost_saved": totals["cost_saved"],
        **({"projected_saved": tally.projected()["tokens_saved"]} if shadow else {}),
    }


__all__ = ["Measure", "client_estimate", "count", "log_fields", "shadow_record", "tools_tokens"]
