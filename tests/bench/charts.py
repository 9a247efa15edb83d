"""PNG charts of the benchmark results (matplotlib, headless), written under docs/bench/.

python -m tests.bench.charts
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.bench.common import ROOT, read_result

OUT = ROOT / "docs" / "bench"
PEERS = (
    ("xun-pass", "xun-proxy, no session", "#7aa6d6"),
    ("xun-session", "xun-proxy, session (compacting path)", "#1f5fa8"),
    ("xun-compact", "xun-proxy, compacting turn", "#0b2e59"),
    ("litellm", "LiteLLM", "#d9822b"),
    ("headroom", "Headroom", "#b3312d"),
)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def overhead_chart(result: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    sizes = [
        s for s in ("2KB", "50KB", "800KB") if any(c["size"] == s for c in result["cells"].values())
    ]
    fig, axes = plt.subplots(2, len(sizes), figsize=(4.6 * len(sizes), 7.2), squeeze=False)
    for col, size in enumerate(sizes):
        for row, stream in enumerate((False, True)):
            ax = axes[row][col]
            cells = sorted(
                (
                    c
                    for c in result["cells"].values()
                    if c["size"] == size and c["stream"] == stream
                ),
                key=lambda c: c["concurrency"],
            )
            for name, label, color in PEERS:
                xs, ys = [], []
                for c in cells:
                    value = (c["targets"].get(name) or {}).get("added_p50_ms")
                    if value is not None:
                        xs.append(c["concurrency"])
                        ys.append(max(value, 0.05))
                if xs:
                    ax.plot(xs, ys, marker="o", label=label, color=color)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks([1, 16, 64], labels=["1", "16", "64"])
            ax.set_title(f"{size} history, {'streaming' if stream else 'JSON'}", fontsize=10)
            ax.set_xlabel("concurrency")
            if col == 0:
                ax.set_ylabel("added p50 latency over direct (ms, log)")
            ax.grid(True, which="both", alpha=0.3)
    legend: dict[str, Any] = {}
    for ax in axes.flat:  # the compacting-turn target has no 2 KB cells: gather from all
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    order = [label for _, label, _ in PEERS if label in legend]
    fig.legend([legend[k] for k in order], order, loc="lower center", ncol=3, fontsize=9)
    fig.suptitle("Latency added over calling the upstream directly (lower is better)")
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def economy_chart(result: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    series = result.get("series") or {}
    names = list(series)[:2]
    fig, axes = plt.subplots(
        1, max(1, len(names)), figsize=(7 * max(1, len(names)), 4.6), squeeze=False
    )
    styles = {"direct": ("black", "-"), "headroom": ("#b3312d", "-")}
    blues = ["#7aa6d6", "#1f5fa8", "#0b2e59", "#5b9b5b", "#2e6b2e", "#143d14"]
    for ax, name in zip(axes[0], names, strict=False):
        k = 0
        for cfg, values in series[name].items():
            color, line = styles.get(cfg, (blues[k % len(blues)], "-"))
            if cfg not in styles:
                k += 1
            ax.plot(
                range(1, len(values) + 1),
                [v / 1000 for v in values],
                line,
                color=color,
                label=cfg,
                lw=1.4,
            )
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("turn")
        ax.set_ylabel("prompt tokens sent upstream (thousands)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Prompt size per turn, replayed trajectories (o200k_base tokens)")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> list[Path]:
    try:
        _plt()
    except ModuleNotFoundError as exc:  # the bench extra is not installed
        print(f"charts not redrawn ({exc}; `pip install -e '.[bench]'` adds matplotlib)")
        return []
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    overhead = read_result("overhead")
    if overhead:
        written.append(overhead_chart(overhead, OUT / "overhead-added-latency.png"))
    economy = read_result("economy")
    if economy:
        written.append(economy_chart(economy, OUT / "economy-prompt-per-turn.png"))
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    main()
