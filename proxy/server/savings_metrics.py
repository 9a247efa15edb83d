"""The savings counters of `/metrics`: prompt tokens and money, by model.

A turn's log fields carry its `savings` (`proxy.turn.billing.log_fields`): what the proxy
billed, what the client's own requests would have been billed sent directly, and the
difference. Each is counted by model, labelled by a price-table entry's name
(`proxy.compaction.prices.Prices.entry`) and every other name as `other`. Saved is a gauge: a
turn that paid for a summary saves less than nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

_MODEL_VALUE = re.compile(r"^[a-z0-9][a-z0-9.-]{0,40}$")


def _model_label(value: Any) -> str:
    """A price-table entry's name (`proxy.compaction.prices.Prices.entry`), else "other"."""
    text = str(value) if value is not None else ""
    return text if _MODEL_VALUE.match(text) else "other"


class SavingsMetrics:
    """The counters and gauges, in one app's registry, and each one's children made so far."""

    def __init__(self, registry: CollectorRegistry) -> None:
        reg = registry
        # Each metric's child by its model label (`_child`), made once.
        self._children: dict[tuple[int, str], Any] = {}
        self.prompt_tokens_sent = Counter(
            "xun_prompt_tokens_sent",
            "Prompt tokens billed through the proxy: requests, extract rounds, summary calls.",
            ["model"],
            registry=reg,
        )
        self.prompt_tokens_direct = Counter(
            "xun_prompt_tokens_direct",
            "Prompt tokens the clients' own requests would have been billed sent directly "
            "(estimated).",
            ["model"],
            registry=reg,
        )
        self.prompt_tokens_saved = Gauge(
            "xun_prompt_tokens_saved_total",
            "Prompt tokens saved: the direct estimate less every prompt token billed.",
            ["model"],
            multiprocess_mode="sum",  # a running total: every worker's, dead ones' too
            registry=reg,
        )
        self.cost_sent = Counter(
            "xun_cost_sent",
            "Money billed through the proxy, where a price is known.",
            ["model"],
            registry=reg,
        )
        self.cost_direct = Counter(
            "xun_cost_direct",
            "Money the clients' requests would have cost directly, where a price is known.",
            ["model"],
            registry=reg,
        )
        self.cost_saved = Gauge(
            "xun_cost_saved_total",
            "Money saved: the direct cost less what was billed, where a price is known.",
            ["model"],
            multiprocess_mode="sum",
            registry=reg,
        )

    def _child(self, metric: Any, model: str) -> Any:
        """`metric.labels(model)`, kept once made."""
        key = (id(metric), model)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(model)
        return child

    def observe(self, saved: Mapping[str, Any]) -> None:
        """A turn's savings (`proxy.turn.billing.log_fields`); shadow turns are not counted."""
        model = _model_label(saved.get("model"))
        for name, counter, gauge in (
            ("sent", self.prompt_tokens_sent, None),
            ("direct", self.prompt_tokens_direct, None),
            ("saved", None, self.prompt_tokens_saved),
            ("cost_sent", self.cost_sent, None),
            ("cost_direct", self.cost_direct, None),
            ("cost_saved", None, self.cost_saved),
        ):
            number = saved.get(name)
            if isinstance(number, bool) or not isinstance(number, int | float):
                continue
            value = float(number)
            if counter is not None and value > 0:
                self._child(counter, model).inc(value)
            if gauge is not None:
                self._child(gauge, model).inc(value)


__all__ = ["SavingsMetrics"]
