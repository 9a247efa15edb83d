"""The cost-aware strategy with its defaults before issue 35 (item 6), for economy runs that
compare them with today's (tests/bench/results/economy-issue35-32k.json):

    C="--compactor before=tests.bench.earlier_defaults:Before35
       --compactor after=proxy.compaction.cache_aware:CacheAwareCompactor"
    python -m tests.bench.economy --skip headroom --thresholds 32000 $C --tag i35-w1.0
    for w in 1.25 2.0; do
      XUN_CACHE_READ_FACTORS='{"": 0.1}' XUN_CACHE_WRITE_FACTORS="{\\"\\": $w}" \\
        python -m tests.bench.economy --skip headroom --cache-factor 0.1 --write-factor $w \\
        --thresholds 32000 $C --tag i35-w$w
    done
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.compaction.cache_aware import CacheAwareCompactor


@dataclass
class Before35(CacheAwareCompactor):
    """Tail 8 % of the threshold, tool results kept within 10 %, a new summary only once the
    session regrew all the last one removed, compaction at the full break-even."""

    tail_ratio: float = 0.08
    keep_tool_ratio: float = 0.1
    regrow_share: float = 1.0
    patience: float = 1.0
