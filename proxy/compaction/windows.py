"""Context windows of common models, and the default compaction threshold they give.

Agents compact their own history as they near the model's window (Claude Code at about 167k
of 200k, Codex near its model's limit), opaquely and losing the originals. The proxy's own
threshold must sit clearly below that point so its cheaper, retrievable compaction comes
first: without an explicit `auto_compact.token_threshold`, a session's threshold is a share
of its model's window when the window is known (configured, learned from a refusal, or in
the table below). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

# The share of a known window the proxy compacts at by default: well below the agents' own
# trigger (Claude Code: ~0.83), leaving room for the reply and the estimate's error.
DEFAULT_WINDOW_SHARE = 0.6
# With an explicit threshold, a known window still caps it: room for the reply.
CAP_WINDOW_SHARE = 0.75

# Model-name prefixes -> context window in tokens; the longest matching prefix wins.
KNOWN_WINDOWS: Mapping[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4-turbo": 128_000,
    "gpt-5": 272_000,
    "codex-mini": 200_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,
    "gemini-1.5": 1_000_000,
    "gemini-2": 1_000_000,
    "llama3.1": 131_072,
    "qwen2.5": 32_768,
}


def known_window(model: str, configured: Mapping[str, int] | None = None) -> int | None:
    """The window of `model`: configured (exact name) first, then the table by prefix."""
    if configured and model in configured:
        return int(configured[model])
    best = ""
    for prefix in KNOWN_WINDOWS:
        if model.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return KNOWN_WINDOWS[best] if best else None


def threshold_for(
    setting: int, *, explicit: bool, window: int | None, learned: bool = False
) -> int:
    """The session's trigger in tokens.

    An explicit setting wins, capped by a known window; without one, a known window gives
    `DEFAULT_WINDOW_SHARE` of it (never above the setting's default). A window learned from
    a refusal always caps the threshold.
    """
    if window is None:
        return setting
    if explicit:
        return min(setting, int(window * CAP_WINDOW_SHARE))
    share = CAP_WINDOW_SHARE if learned else DEFAULT_WINDOW_SHARE
    return min(setting, max(1, int(window * share)))
