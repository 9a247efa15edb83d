"""The look-back counters of `/metrics`: what the model asked back, by tool name.

A turn's request state carries its `lookback` record (`proxy.turn.asked_back.TurnLookBack.settle`):
results reclaimed, reads and re-runs by tool name, and searches with and without hits. Tool
names are client input, so a label is the name only when it is a plain identifier of at
most 64 characters, and one process labels at most `MAX_TOOL_LABELS` names; every other
name counts as `other`, and a read of no known result as `unknown`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter

MAX_TOOL_LABELS = 50
_TOOL = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_UNKNOWN = "(unknown)"  # proxy.session.asked_back.UNKNOWN


class LookBackMetrics:
    """The counters, in one app's registry, and the tool labels given so far."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._tools: set[str] = set()
        self.by_tool = {
            field: Counter(
                f"xun_lookback_{field}",
                help_text,
                ["tool"],
                registry=registry,
            )
            for field, help_text in (
                ("reclaimed", "Tool results reclaimed by level 1, by tool name."),
                ("reads", "Reclaimed results the model read back by id, by tool name."),
                (
                    "reruns",
                    "Tool calls the client's model made again with the name and arguments "
                    "of a reclaimed result, by tool name.",
                ),
            )
        }
        self.searches = Counter(
            "xun_lookback_searches",
            "Searches of the hidden tool, by outcome: hit (found something) or empty.",
            ["outcome"],
            registry=registry,
        )

    def tool_label(self, name: Any) -> str:
        """A tool name as a label: bounded vocabulary, see the module doc."""
        if name == _UNKNOWN:
            return "unknown"
        if not isinstance(name, str) or not _TOOL.match(name):
            return "other"
        if name in self._tools:
            return name
        if len(self._tools) >= MAX_TOOL_LABELS:
            return "other"
        self._tools.add(name)
        return name

    def observe(self, record: Any) -> None:
        """One turn's `lookback` record."""
        if not isinstance(record, Mapping):
            return
        for field, counter in self.by_tool.items():
            counts = record.get(field)
            if not isinstance(counts, Mapping):
                continue
            for name, n in counts.items():
                if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                    counter.labels(tool=self.tool_label(name)).inc(n)
        searches = record.get("searches")
        if isinstance(searches, Mapping):
            for key, outcome in (("hits", "hit"), ("empty", "empty")):
                n = searches.get(key)
                if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                    self.searches.labels(outcome=outcome).inc(n)


__all__ = ["MAX_TOOL_LABELS", "LookBackMetrics"]
