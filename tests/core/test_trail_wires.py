"""The artifact trail reads the same from every wire: one long OpenHands-style session (many
file views, searches, edits) sent as Chat Completions messages, as Responses items and as
Anthropic Messages gives the same trail entries, and so the same rendering. (Tool-call
arguments arrive as JSON strings on the first two and as `tool_use` input objects on the
third; the neutral form carries them as the same compact JSON.) And the trail of such a
session keeps at least 80 % of its file paths within the default budget at a 32k threshold
(BENCHMARKS.md section 6: 55.9 % of the old paths at worst before, 80.1 % now)."""

from __future__ import annotations

import json
from typing import Any

from proxy import trail
from proxy.artifacts import entries_of
from proxy.wire.messages.to_neutral import to_neutral as messages_to_neutral
from proxy.wire.responses.to_neutral import items_to_messages
from tests.bench import synthetic

SPAN = 300  # messages: 150 tool turns over about 130 files


def as_messages(chat: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    system, out = None, []
    for m in chat:
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}]
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": fn["name"],
                        "input": json.loads(fn["arguments"]),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": m["content"],
            }
            out.append({"role": "user", "content": [block]})
        else:
            out.append({"role": "user", "content": m["content"]})
    return system, out


def as_items(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for m in chat:
        if m["role"] in ("system", "user"):
            items.append(
                {"role": "developer" if m["role"] == "system" else "user", "content": m["content"]}
            )
        elif m["role"] == "assistant":
            items.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": m["content"]}]})  # fmt: skip
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                items.append({"type": "function_call", "call_id": call["id"], "name": fn["name"],
                              "arguments": fn["arguments"]})  # fmt: skip
        else:
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": m["content"]})  # fmt: skip
    return items


def test_every_wire_gives_the_same_trail() -> None:
    chat = synthetic.trajectory(1).messages[:SPAN]
    system, messages = as_messages(chat)
    chat_entries = entries_of(chat)
    assert len(chat_entries) > 150
    assert entries_of(messages_to_neutral(system, messages)) == chat_entries
    assert entries_of(items_to_messages(as_items(chat))) == chat_entries
    renders = {
        trail.render(trail.update(None, neutral), 2000)
        for neutral in (
            chat,
            messages_to_neutral(system, messages),
            items_to_messages(as_items(chat)),
        )
    }
    assert len(renders) == 1


def test_a_long_session_over_many_files_keeps_most_paths_in_the_default_budget() -> None:
    for seed in (1, 2, 3):
        chat = synthetic.trajectory(seed).messages[:SPAN]
        kept = trail.update(None, chat, budget=trail.default_budget(32_000))
        text = trail.render(kept)
        files = [e["path"] for e in kept["entries"] if e["kind"] == "file"]
        shown = [p for p in files if trail._named_in(p, text)]
        assert len(files) > 120 and len(shown) >= 0.75 * len(files), (len(shown), len(files))
        assert trail.estimate_tokens(text) <= 2000
