"""The providers' own compaction, as the Responses and Messages wires read it.

OpenAI's Responses API compacts when a request asks it to: `context_management:
[{"type": "compaction", "compact_threshold": N}]` (server-side, past a threshold) or a last
input item `{"type": "compaction_trigger"}` (now; Codex's remote compaction). It answers
with a `compaction` item (`encrypted_content`) that later inputs carry first. Anthropic's
Messages API does it for `context_management.edits` holding a `compact_20260112` edit, or an
on-demand `compaction: {"type": "summarize"}`, and answers with a signed `compaction` block
that later requests send first.

Such a request is not compacted by the proxy as well (`asks_*`), and a neutral message that
carries a compaction item or block is marked (`X_PROVIDER_COMPACTION`): what comes before
it, and it, are the session's new beginning (`proxy.session.history.provider_floor`). Everything
here is read, never changed: the items, blocks and fields go upstream byte for byte. Pure.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPACTION", "asks_messages", "asks_responses", "has_compaction_block"]

COMPACTION = "compaction"  # the item type (Responses) and the block type (Messages)
TRIGGER = "compaction_trigger"  # a Responses input item: compact now
COMPACT_EDIT = "compact_20260112"  # a Messages context-management edit that compacts


def asks_responses(body: dict[str, Any]) -> bool:
    """A Responses request that asks the provider to compact (now, or past a threshold)."""
    managed = body.get("context_management")
    if isinstance(managed, list) and any(
        isinstance(entry, dict) and entry.get("type") == COMPACTION for entry in managed
    ):
        return True
    items = body.get("input")
    # The trigger must be the last item (OpenAI refuses it elsewhere); any place counts here,
    # so the proxy never reshapes a request the provider will judge.
    return isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") == TRIGGER for item in items
    )


def asks_messages(body: dict[str, Any]) -> bool:
    """A Messages request that asks the provider to compact: on demand, or by an edit."""
    if body.get(COMPACTION) is not None:
        return True
    managed = body.get("context_management")
    edits = managed.get("edits") if isinstance(managed, dict) else None
    return isinstance(edits, list) and any(
        isinstance(edit, dict) and edit.get("type") == COMPACT_EDIT for edit in edits
    )


def has_compaction_block(content: Any) -> bool:
    """A Messages content list that holds a `compaction` block."""
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == COMPACTION for block in content
    )
