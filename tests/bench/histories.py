"""Synthetic agent histories of a given byte size, built from real text of the corpus.

A history is the request body of one agent turn: a system prompt, the task, then assistant
tool calls each followed by its tool result, with the tool results sized so that the JSON
body reaches the target. Text is real lines of the corpus' tool outputs (so it compresses and
tokenises like real traffic), picked deterministically; without the corpus, generated lines.
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import orjson

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command to run"}},
            "required": ["command"],
        },
    },
}
SYSTEM = (
    "You are a careful software engineering agent. You work in a Linux sandbox through the "
    "bash tool. Read the code before changing it, run the tests after every change, and keep "
    "your answers short. When you are done, print the final diff."
)
TASK = (
    "The test suite fails on tests/test_parser.py::test_nested_quotes. Find the cause and fix it."
)


@functools.cache
def text_lines() -> tuple[str, ...]:
    """Real lines of tool output from the corpus (deterministic order), or generated ones."""
    lines: list[str] = []
    try:
        from tests.corpus import long_trajectories

        for traj in long_trajectories():
            for msg in traj.messages:
                if msg.get("role") == "tool" and isinstance(msg.get("content"), str):
                    lines.extend(ln for ln in msg["content"].splitlines() if 8 <= len(ln) <= 200)
            if len(lines) > 40_000:
                break
    except Exception:  # no corpus here: generated text still makes a valid benchmark
        lines = []
    if len(lines) < 1000:
        rng = random.Random(7)
        words = "def return self value path error test file line import class for in if".split()
        lines = [
            " ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) for _ in range(5000)
        ]
    return tuple(lines)


def _fill(rng: random.Random, size: int) -> str:
    lines = text_lines()
    out: list[str] = []
    total = 0
    start = rng.randrange(len(lines))
    i = 0
    while total < size:
        line = lines[(start + i) % len(lines)]
        out.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(out)[:size]


def history(target_bytes: int, n_messages: int, seed: int = 1) -> list[dict[str, Any]]:
    """System + task + (assistant call, tool result) pairs: `n_messages` in all, about
    `target_bytes` of JSON once wrapped in a request body."""
    rng = random.Random(seed)
    pairs = max(1, (n_messages - 2) // 2)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    for k in range(pairs):
        command = f"grep -n 'quote' src/parser/module_{k}.py | head -50"
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {k}: checking module_{k}.",
                "tool_calls": [
                    {
                        "id": f"call_{k:04d}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{k:04d}", "content": ""})
    fixed = len(orjson.dumps(body(messages)))
    per_tool = max(8, (target_bytes - fixed) // pairs)
    for _ in range(2):  # second pass: correct for JSON escaping of newlines and quotes
        state = rng.getstate()
        for msg in messages:
            if msg["role"] == "tool":
                msg["content"] = _fill(rng, per_tool)
        actual = len(orjson.dumps(body(messages)))
        rng.setstate(state)
        per_tool = max(8, int(per_tool * (target_bytes - fixed) / max(1, actual - fixed)))
    return messages


def body(messages: list[dict[str, Any]], *, stream: bool = False, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "gpt-4o", "messages": messages, "tools": [BASH_TOOL]}
    if stream:
        out["stream"] = True
    out.update(extra)
    return out
