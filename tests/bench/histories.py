"""Synthetic agent histories of a given byte size, built from real text of the corpus.

A history is the request body of one agent turn: a system prompt, the task, then assistant
tool calls each followed by its tool result, with the tool results sized so that the JSON
body reaches the target. `history`/`body` give it as Chat Completions, `responses_body` as
a stateless Responses request (Codex CLI's shape) and `messages_body` as an Anthropic
Messages request (Claude Code's shape). Text is real lines of the corpus' tool outputs (so
it compresses and tokenises like real traffic), picked deterministically; without the
corpus, generated lines.
"""

from __future__ import annotations

import base64
import functools
import json
import random
from collections.abc import Callable
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
        from tests.support.corpus import long_trajectories

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


# -- the same agent history in the Responses API's item shape (as Codex CLI sends it) ---------

EXEC_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command in a PTY, returning output or a session ID.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "description": "Shell command to execute."},
            "workdir": {"type": "string", "description": "The working directory."},
        },
        "required": ["cmd"],
        "additionalProperties": False,
    },
}
DEVELOPER = (
    "<permissions instructions>Filesystem sandboxing: workspace-write. Approval policy: "
    "on-request.</permissions instructions>"
)


def _blob(rng: random.Random, size: int) -> str:
    """An opaque token shaped like OpenAI's `encrypted_content` (base64 of random bytes)."""
    return "gAAAAA" + base64.urlsafe_b64encode(rng.randbytes(size * 3 // 4)).decode()


def _opaque_size(target_bytes: int, pairs: int) -> int:
    """Bytes of each opaque blob (encrypted reasoning, a thinking signature): a fifth of a
    step's share of the body, between 32 and 900, so that histories of one size hold the
    same number of messages in every API (real blobs are 0.3-3 KB; the 800 KB history's
    are that size, the 50 KB one's are shorter so that its steps still fit)."""
    return max(32, min(900, (target_bytes // max(1, pairs)) // 5))


def _chat_output_chars(target_bytes: int, n_messages: int) -> int:
    """The mean tool-result size of the Chat Completions history of this size."""
    results = [m["content"] for m in history(target_bytes, n_messages) if m["role"] == "tool"]
    return sum(len(r) for r in results) // max(1, len(results))


def _sized(
    target_bytes: int,
    n_messages: int,
    rng: random.Random,
    build: Callable[[list[str]], dict[str, Any]],
) -> dict[str, Any]:
    """The body `build(outputs)` of about `target_bytes` of JSON.

    Its tool outputs are about as long as the Chat Completions history's of the same size,
    so the APIs' histories carry the same text; since a Responses or Messages step carries
    more structure (reasoning, ids, blocks), it holds fewer steps than `n_messages` gives
    when that is what fits. The outputs are then sized to the target (two passes correct
    for the escaping of newlines and quotes).
    """
    pairs = max(1, (n_messages - 2) // 2)
    wanted = _chat_output_chars(target_bytes, n_messages)
    while pairs > 1:
        fixed = len(orjson.dumps(build([""] * pairs)))
        if fixed + pairs * wanted <= target_bytes:
            break
        pairs -= 1
    fixed = len(orjson.dumps(build([""] * pairs)))
    per_tool = max(8, (target_bytes - fixed) // pairs)
    result = build([""] * pairs)
    for _ in range(2):
        state = rng.getstate()
        result = build([_fill(rng, per_tool) for _ in range(pairs)])
        actual = len(orjson.dumps(result))
        rng.setstate(state)
        per_tool = max(8, int(per_tool * (target_bytes - fixed) / max(1, actual - fixed)))
    return result


def responses_body(
    target_bytes: int, n_messages: int, seed: int = 1, *, stream: bool = False, **extra: Any
) -> dict[str, Any]:
    """A stateless Responses request (`store: false`, the whole history in `input`): the
    instructions, a developer and a user item, then per step a reasoning item carrying
    `encrypted_content`, now and then an assistant message, a `function_call` and its
    `function_call_output`. `n_messages` counts neutral messages as for `history` (a step's
    reasoning, message and call are one assistant message): an upper bound, see `_sized`."""
    rng = random.Random(seed)
    size = _opaque_size(target_bytes, max(1, (n_messages - 2) // 2))
    blobs = [_blob(random.Random(seed * 100_003 + k), size) for k in range(n_messages)]

    def build(outputs: list[str]) -> dict[str, Any]:
        items: list[dict[str, Any]] = [
            {"type": "message", "role": "developer", "content": [_text("input", DEVELOPER)]},
            {"type": "message", "role": "user", "content": [_text("input", TASK)]},
        ]
        for k, output in enumerate(outputs):
            summary = f"**Checking module {k}**\n\nLooking for the quote handling."
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_bench{k:04d}",
                    "summary": [{"type": "summary_text", "text": summary}],
                    "content": None,
                    "encrypted_content": blobs[k],
                }
            )
            if k % 5 == 0:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [_text("output", f"Step {k}: checking module_{k}.")],
                    }
                )
            command = f"grep -n 'quote' src/parser/module_{k}.py | head -50"
            items.append(
                {
                    "type": "function_call",
                    "name": "exec_command",
                    "arguments": json.dumps({"cmd": command, "workdir": "/repo"}),
                    "call_id": f"call_{k:04d}",
                }
            )
            items.append(
                {"type": "function_call_output", "call_id": f"call_{k:04d}", "output": output}
            )
        out: dict[str, Any] = {
            "model": "gpt-5-codex",
            "instructions": SYSTEM,
            "input": items,
            "tools": [EXEC_TOOL, {"type": "web_search"}],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "bench",
        }
        return out

    out = _sized(target_bytes, n_messages, rng, build)
    out["stream"] = stream
    out.update(extra)
    return out


def _text(kind: str, text: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": f"{kind}_text", "text": text}
    if kind == "output":
        part["annotations"] = []
    return part


# -- the same agent history in Anthropic's Messages shape (as Claude Code sends it) -----------

BASH_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command to execute"},
        "description": {"type": "string", "description": "What the command does"},
    },
    "required": ["command"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}
EPHEMERAL = {"type": "ephemeral"}


def messages_body(
    target_bytes: int, n_messages: int, seed: int = 1, *, stream: bool = False, **extra: Any
) -> dict[str, Any]:
    """A Messages request: `system` blocks with `cache_control`, the task, then per step an
    assistant turn (a `thinking` block with its signature, now and then text, a `tool_use`)
    and a user turn with its `tool_result` (content a string or text blocks), the last block
    marked for caching as Claude Code marks it; `n_messages` as for `responses_body`."""
    rng = random.Random(seed)
    size = _opaque_size(target_bytes, max(1, (n_messages - 2) // 2))
    signatures = [
        base64.b64encode(random.Random(seed * 100_003 + k).randbytes(size)).decode()
        for k in range(n_messages)
    ]

    def build(outputs: list[str]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": TASK}]}
        ]
        for k, output in enumerate(outputs):
            blocks: list[dict[str, Any]] = [
                {
                    "type": "thinking",
                    "thinking": f"Module {k} may hold the quote handling; grep it.",
                    "signature": signatures[k],
                }
            ]
            if k % 5 == 0:
                blocks.append({"type": "text", "text": f"Step {k}: checking module_{k}."})
            command = f"grep -n 'quote' src/parser/module_{k}.py | head -50"
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_01bench{k:010d}",
                    "name": "Bash",
                    "input": {"command": command, "description": f"Search module {k}"},
                }
            )
            content: Any = output if k % 2 else [{"type": "text", "text": output}]
            messages.append({"role": "assistant", "content": blocks})
            result = {"type": "tool_result", "tool_use_id": f"toolu_01bench{k:010d}"}
            messages.append({"role": "user", "content": [{**result, "content": content}]})
        last = messages[-1]["content"][-1]
        last["cache_control"] = EPHEMERAL
        return {
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 32000,
            "system": [
                {"type": "text", "text": "You are Claude Code.", "cache_control": EPHEMERAL},
                {"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL},
            ],
            "messages": messages,
            "tools": [
                {
                    "name": "Bash",
                    "description": "Executes a bash command",
                    "input_schema": BASH_INPUT_SCHEMA,
                }
            ],
            "thinking": {"type": "enabled", "budget_tokens": 16000},
            "metadata": {"user_id": "user_bench_session"},
        }

    out = _sized(target_bytes, n_messages, rng, build)
    out["stream"] = stream
    out.update(extra)
    return out
