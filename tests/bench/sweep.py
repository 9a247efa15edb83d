"""Parameter variants of the cost-aware compactor for the economy benchmark.

    XUN_SWEEP='{"p1": {"patience": 1.0}, "tail8": {"tail_ratio": 0.08}}' \\
    XUN_CACHE_READ_FACTORS='{"": 0.1}' python -m tests.bench.economy --skip headroom \\
        --only mini-v claude-code openhands swe-agent --cache-factor 0.1 \\
        --compactor p1=tests.bench.sweep:p1 --compactor tail8=tests.bench.sweep:tail8 \\
        --tag sweep

Each name in `XUN_SWEEP` is a `CacheAwareCompactor` subclass with those fields as defaults,
importable as `tests.bench.sweep:<name>` (the proxy processes inherit the variable), so one
run compares several settings on the same replay. Variants only: the shipped defaults live in
`proxy.compaction.cache_aware`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from proxy.compaction.cache_aware import CacheAwareCompactor


def __getattr__(name: str) -> Any:
    params = json.loads(os.environ.get("XUN_SWEEP") or "{}")
    if name not in params:
        raise AttributeError(name)
    fields = {f.name: f for f in dataclasses.fields(CacheAwareCompactor)}
    unknown = set(params[name]) - set(fields)
    if unknown:
        raise AttributeError(f"{name}: unknown fields {sorted(unknown)}")
    variant = type(name, (CacheAwareCompactor,), dict(params[name]))
    variant.__annotations__ = {k: fields[k].type for k in params[name]}
    return dataclasses.dataclass(variant)
