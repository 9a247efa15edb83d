"""Real agent trajectories from the shared corpus, converted to OpenAI chat messages in code.

The raw files (`/work/shared/corpus/raw`, described in `shared/corpus/SOURCES.md`) come in
seven formats; each loader here applies the mapping of SOURCES.md section 3 and returns
`Trajectory` values whose `messages` form a valid chat-completions sequence
(`validate_sequence`). Parsed files and converted trajectories are cached in-process and
shared between callers: treat them as read-only.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

Message = dict[str, Any]

CORPUS_DIR = Path(
    os.environ.get("XUN_CORPUS_DIR")
    or Path(__file__).resolve().parents[3] / "shared" / "corpus" / "raw"
)
# A few of its trajectories committed with the tests (tests/corpus_sample/README.md): the
# economy promise and the replays run on them wherever the full corpus is absent.
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "corpus_sample" / "raw"
FULL_CORPUS = CORPUS_DIR.is_dir()
REPLAY_DIR = CORPUS_DIR if FULL_CORPUS else SAMPLE_DIR

# What mini-swe-agent sends in tool-calling mode (SOURCES.md 3.2); v1 uses it for the
# synthesised calls too.
BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command to execute"}
            },
            "required": ["command"],
        },
    },
}

_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_V1_OBSERVATION = ("<returncode>", "The last command")
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
LONG_SOURCES = frozenset({"mini-swe-agent-v1", "mini-swe-agent-v2", "claude-code"})


@dataclass
class Trajectory:
    name: str
    source: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    reported_peak: int | None
    # When each message was written (epoch seconds), where the source records it (Claude
    # Code); the token economy replays each turn at its time (cold prompt caches included).
    times: list[float | None] | None = None


# -- validity -----------------------------------------------------------------------------


def validate_sequence(messages: list[Message]) -> None:
    """Raise AssertionError naming the first message that breaks the chat-completions rules.

    Tool results directly follow the assistant message that called them (only other tool
    results in between); every call gets exactly one result before the next non-tool message.
    Ids may repeat across assistant messages (tau-bench does), not within one.
    """
    assert isinstance(messages, list), f"messages is a {type(messages).__name__}, not a list"
    pending: dict[str, int] = {}  # call id -> index of the assistant message that made it
    answered: set[str] = set()
    for i, msg in enumerate(messages):
        assert isinstance(msg, dict), f"message {i} is a {type(msg).__name__}, not an object"
        role = msg.get("role")
        assert role in _ROLES, f"message {i}: unknown role {role!r}"
        if role != "tool" and pending:
            raise AssertionError(
                f"message {i} ({role}) comes before the results of calls {sorted(pending)} "
                f"made by the assistant message {min(pending.values())}"
            )
        if role == "tool":
            call_id = msg.get("tool_call_id")
            assert isinstance(call_id, str), f"message {i}: tool message without a tool_call_id"
            if call_id in answered:
                raise AssertionError(f"message {i}: second result for tool call {call_id!r}")
            if call_id not in pending:
                raise AssertionError(
                    f"message {i}: tool result for {call_id!r} does not follow an assistant "
                    "message that called it"
                )
            del pending[call_id]
            answered.add(call_id)
            _check_content(i, msg, allow_none=False)
        elif role == "assistant":
            answered = set()
            calls = msg.get("tool_calls")
            if calls is not None:
                assert isinstance(calls, list) and calls, (
                    f"message {i}: tool_calls must be a non-empty list, got {calls!r}"
                )
                for j, call in enumerate(calls):
                    _check_call(i, j, call)
                    assert call["id"] not in pending, (
                        f"message {i}: tool call id {call['id']!r} appears twice in one message"
                    )
                    pending[call["id"]] = i
            _check_content(i, msg, allow_none=bool(calls))
        else:
            _check_content(i, msg, allow_none=False)
    if pending:
        raise AssertionError(
            f"the sequence ends before the results of calls {sorted(pending)} "
            f"made by the assistant message {min(pending.values())}"
        )


def _check_call(i: int, j: int, call: Any) -> None:
    where = f"message {i}, tool call {j}"
    assert isinstance(call, dict), f"{where}: not an object"
    assert isinstance(call.get("id"), str) and call["id"], f"{where}: no id"
    assert call.get("type") == "function", f"{where}: type is {call.get('type')!r}"
    fn = call.get("function")
    assert isinstance(fn, dict), f"{where}: no function object"
    assert isinstance(fn.get("name"), str) and fn["name"], f"{where}: no function name"
    assert isinstance(fn.get("arguments"), str), f"{where}: arguments are not a string"


def _check_content(i: int, msg: Message, *, allow_none: bool) -> None:
    content = msg.get("content")
    if content is None:
        assert allow_none, f"message {i} ({msg['role']}) has no content"
        return
    if isinstance(content, list):
        for part in content:
            assert isinstance(part, dict) and isinstance(part.get("type"), str), (
                f"message {i}: content part {part!r} is not a typed object"
            )
        return
    assert isinstance(content, str), f"message {i}: content is a {type(content).__name__}"


# -- shared helpers -----------------------------------------------------------------------


@functools.cache  # lru_cache without a bound: each file is parsed once
def _read(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


@functools.cache
def _read_lines(path: Path) -> tuple[Any, ...]:
    return tuple(orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip())


def _drop_unanswered_tail(messages: list[Message]) -> list[Message]:
    """End before a last assistant turn whose calls never got results (a submit or finish)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            calls = {c["id"] for c in messages[i].get("tool_calls") or []}
            answered = {m.get("tool_call_id") for m in messages[i + 1 :]}
            return messages[:i] if calls - answered else messages
    return messages


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _plain_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call with only the fields a client sends back (no `index`)."""
    fn = call["function"]
    return _call(call["id"], fn["name"], fn["arguments"])


_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}


def synthesize_tools(messages: list[Message]) -> list[dict[str, Any]]:
    """Minimal schemas for the tools the calls use, with the argument names seen."""
    props: dict[str, dict[str, set[str]]] = {}
    for msg in messages:
        for call in msg.get("tool_calls") or []:
            fields = props.setdefault(call["function"]["name"], {})
            try:
                args = json.loads(call["function"]["arguments"] or "{}")
            except json.JSONDecodeError:
                continue
            for key, value in args.items() if isinstance(args, dict) else ():
                fields.setdefault(key, set()).add(_JSON_TYPES.get(type(value), "object"))
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name} (schema synthesised from the recorded calls)",
                "parameters": {
                    "type": "object",
                    "properties": {
                        k: ({"type": next(iter(t))} if len(t) == 1 else {})
                        for k, t in sorted(fields.items())
                    },
                },
            },
        }
        for name, fields in props.items()
    ]


def _peak(values: list[int | None]) -> int | None:
    known = [v for v in values if isinstance(v, int)]
    return max(known) if known else None


# -- mini-swe-agent -----------------------------------------------------------------------


def load_mini_v1(path: Path, *, reasoning: bool = True) -> list[Trajectory]:
    """mini-swe-agent 1.x text actions: bash calls synthesised from the ```bash block.

    Observations become tool results, format errors stay user turns. The provider's
    `reasoning` (in the raw response only) is added as an OpenRouter client echoes it back;
    `reasoning=False` leaves the messages as mini sent them.
    """
    data = _read(Path(path))
    raw = data["messages"]
    out: list[Message] = []
    pending: str | None = None
    calls = 0
    for i, msg in enumerate(raw):
        role, content = msg["role"], msg["content"]
        if role == "assistant":
            if pending is not None:
                raise ValueError(f"{path}: message {i} follows the unanswered {pending}")
            new: Message = {"role": "assistant", "content": content}
            blocks = _BASH_BLOCK.findall(content)
            if len(blocks) == 1:  # 0 or 2+ blocks get a format error, not a run
                calls += 1
                pending = f"call_{calls}"
                arguments = json.dumps({"command": blocks[0]})
                new["tool_calls"] = [_call(pending, "bash", arguments)]
            thought = _response(msg).get("choices", [{}])[0].get("message", {}).get("reasoning")
            if reasoning and isinstance(thought, str) and thought:
                new["reasoning"] = thought
            out.append(new)
        elif pending is not None and (content.startswith(_V1_OBSERVATION) or i == len(raw) - 1):
            # The last message is the submission diff, the output of the submit command.
            out.append({"role": "tool", "tool_call_id": pending, "content": content})
            pending = None
        else:
            if pending is not None:
                raise ValueError(f"{path}: message {i} is not the result of {pending}")
            out.append({"role": role, "content": content})
    peak = _peak([_response(m).get("usage", {}).get("prompt_tokens") for m in raw])
    name = "mini-v1/" + data.get("instance_id", Path(path).name)
    return [Trajectory(name, "mini-swe-agent-v1", out, [BASH_TOOL], peak)]


def _response(msg: Message) -> dict[str, Any]:
    return (msg.get("extra") or {}).get("response") or {}


def load_mini_v2(path: Path) -> list[Trajectory]:
    """mini-swe-agent 2.x native tool calls; the `exit` record was never sent to the model."""
    data = _read(Path(path))
    out: list[Message] = []
    for msg in data["messages"]:
        role = msg["role"]
        if role == "exit":
            continue
        new: Message = {"role": role, "content": msg.get("content")}
        if msg.get("tool_calls"):
            new["tool_calls"] = [_plain_call(c) for c in msg["tool_calls"]]
        if role == "tool":
            new["tool_call_id"] = msg["tool_call_id"]
        out.append(new)
    peak = _peak([_response(m).get("usage", {}).get("prompt_tokens") for m in data["messages"]])
    name = "mini-v2/" + data.get("instance_id", Path(path).name)
    return [Trajectory(name, "mini-swe-agent-v2", _drop_unanswered_tail(out), [BASH_TOOL], peak)]


# -- Claude Code --------------------------------------------------------------------------


def load_claude_code(path: Path, *, reasoning: bool = True) -> list[Trajectory]:
    """A Claude Code JSONL session, split at its compact boundary into two segments.

    Streaming chunks of one response (one content block per line, same `message.id`) are
    merged; they may interleave with the results of parallel calls, which stay after it.
    Thinking becomes `reasoning_content` (dropped with `reasoning=False`).
    """
    segments: list[tuple[list[Message], list[int | None]]] = [([], [])]
    stamps: list[list[float | None]] = [[]]  # per segment, one per message
    by_id: dict[str, Message] = {}
    for line in _read_lines(Path(path)):
        kind = line.get("type")
        if kind == "system" and line.get("subtype") == "compact_boundary":
            segments.append(([], []))
            stamps.append([])
            by_id = {}
            continue
        if kind not in ("user", "assistant"):
            continue
        out, usage = segments[-1]
        before = len(out)
        message = line["message"]
        if kind == "assistant":
            usage.append(_anthropic_prompt_tokens(message.get("usage")))
            msg = by_id.get(message["id"])
            if msg is None:
                msg = by_id[message["id"]] = {"role": "assistant", "content": None}
                out.append(msg)
            for block in message["content"]:
                _add_block(msg, block, reasoning=reasoning)
        elif isinstance(message["content"], str):
            out.append({"role": "user", "content": message["content"]})
        else:
            texts = []
            for block in message["content"]:
                if block["type"] == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = [{"type": "text", "text": p["text"]} for p in content]
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": block["tool_use_id"],
                            "content": content if content is not None else "",
                        }
                    )
                elif block["type"] == "text":
                    texts.append(block["text"])
                else:
                    raise ValueError(f"{path}: unexpected user block {block['type']!r}")
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
        stamps[-1].extend([_epoch(line.get("timestamp"))] * (len(out) - before))
    session = Path(path).stem[:8]
    trajectories = []
    for n, (messages, usage) in enumerate(segments):
        messages = _drop_unanswered_tail(messages)
        times = stamps[n][: len(messages)]
        trajectories.append(
            Trajectory(
                f"claude-code/{session}#{n}",
                "claude-code",
                messages,
                synthesize_tools(messages),
                _peak(usage),
                times,
            )
        )
    return trajectories


def _epoch(stamp: Any) -> float | None:
    """An ISO 8601 timestamp ("2026-02-11T21:41:44.636Z") in epoch seconds."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _anthropic_prompt_tokens(usage: Any) -> int | None:
    if not isinstance(usage, dict):
        return None
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(int(usage.get(k) or 0) for k in keys)


def _add_block(msg: Message, block: dict[str, Any], *, reasoning: bool) -> None:
    kind = block["type"]
    if kind == "text":
        msg["content"] = (msg["content"] or "") + block["text"]
    elif kind == "thinking":
        if reasoning:
            msg["reasoning_content"] = msg.get("reasoning_content", "") + block["thinking"]
    elif kind == "tool_use":
        call = _call(block["id"], block["name"], json.dumps(block["input"]))
        msg.setdefault("tool_calls", []).append(call)
    else:
        raise ValueError(f"unexpected assistant block {kind!r}")


# -- OpenHands ----------------------------------------------------------------------------


def load_openhands(path: Path) -> list[Trajectory]:
    """OpenHands v0 `output.jsonl`: one event history per line, rebuilt into messages."""
    trajectories = []
    for record in _read_lines(Path(path)):
        out: list[Message] = []
        tools: list[dict[str, Any]] = []
        responses: set[str] = set()
        for event in record["history"]:
            action, observation = event.get("action"), event.get("observation")
            meta = event.get("tool_call_metadata")
            if "recall" in (action, observation):
                continue  # workspace context, folded into the prompt by OpenHands; dropped
            if action == "system":
                out.append({"role": "system", "content": event["args"]["content"]})
                tools = event["args"].get("tools") or []
            elif action == "message" and event["source"] == "user":
                out.append({"role": "user", "content": event["args"]["content"]})
            elif action is not None and meta:
                # Several actions of one response share its model_response: one message.
                response = meta["model_response"]
                if response["id"] in responses:
                    continue
                responses.add(response["id"])
                reply = response["choices"][0]["message"]
                new: Message = {"role": "assistant", "content": reply.get("content")}
                if reply.get("tool_calls"):
                    new["tool_calls"] = [_plain_call(c) for c in reply["tool_calls"]]
                out.append(new)
            elif action == "message":
                out.append({"role": "assistant", "content": event["args"]["content"]})
            elif observation is not None and meta:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": meta["tool_call_id"],
                        "content": event["content"],
                    }
                )
            elif observation == "error":
                # An invalid call never became an action; the model is told as a user turn.
                out.append({"role": "user", "content": event["content"]})
            else:
                raise ValueError(f"{path}: unexpected event {action!r}/{observation!r}")
        usages = (record.get("metrics") or {}).get("token_usages") or []
        trajectories.append(
            Trajectory(
                "openhands/" + record["instance_id"],
                "openhands",
                _drop_unanswered_tail(out),
                tools,
                _peak([u.get("prompt_tokens") for u in usages]),
            )
        )
    return trajectories


# -- SWE-agent, tau-bench, tau2-bench -----------------------------------------------------


def load_swe_agent(path: Path) -> list[Trajectory]:
    """SWE-agent 1.x `.traj`: `history` is already OpenAI-shaped, with extra bookkeeping."""
    out: list[Message] = []
    for msg in _read(Path(path))["history"]:
        new: Message = {"role": msg["role"], "content": msg["content"]}
        if msg.get("tool_calls"):
            new["tool_calls"] = [_plain_call(c) for c in msg["tool_calls"]]
        if msg["role"] == "tool":
            new["tool_call_id"] = msg["tool_call_ids"][0]
        out.append(new)
    out = _drop_unanswered_tail(out)
    name = "swe-agent/" + Path(path).name.removesuffix(".traj")
    return [Trajectory(name, "swe-agent", out, synthesize_tools(out), None)]


def load_tau_bench(path: Path) -> list[Trajectory]:
    """tau-bench: `traj` is the OpenAI message list itself, kept exactly (ids may repeat)."""
    runs = _read(Path(path))
    # One environment, one tool list for every conversation: schemas from all the calls.
    tools = synthesize_tools([m for run in runs for m in run["traj"]])
    return [
        Trajectory(
            f"tau-bench/task{run['task_id']}-trial{run['trial']}",
            "tau-bench",
            run["traj"],
            tools,
            None,
        )
        for run in runs
    ]


def load_tau2_bench(path: Path) -> list[Trajectory]:
    """tau2-bench simulations: tau2's flattened messages, the policy as the system prompt."""
    data = _read(Path(path))
    policy = data["info"]["environment_info"]["policy"]
    trajectories = []
    for sim in data["simulations"]:
        out: list[Message] = [{"role": "system", "content": policy}]
        usage: list[int | None] = []
        for msg in sim["messages"]:
            new: Message = {"role": msg["role"], "content": msg.get("content")}
            if msg["role"] == "tool":
                new["tool_call_id"] = msg["id"]
            elif msg.get("tool_calls"):
                new["tool_calls"] = [
                    _call(c["id"], c["name"], json.dumps(c["arguments"])) for c in msg["tool_calls"]
                ]
            if msg["role"] == "assistant":
                usage.append((msg.get("usage") or {}).get("prompt_tokens"))
            out.append(new)
        name = f"tau2-bench/task{sim['task_id']}-trial{sim['trial']}"
        trajectories.append(Trajectory(name, "tau2-bench", out, [], _peak(usage)))
    tools = synthesize_tools([m for t in trajectories for m in t.messages])
    for traj in trajectories:
        traj.tools = tools
    return trajectories


# -- the whole corpus ---------------------------------------------------------------------

Loader = Callable[[Path], list[Trajectory]]
LOADERS: tuple[tuple[str, Loader], ...] = (
    ("mini-swe-agent-v1_gemini-3-pro/*.traj.json", load_mini_v1),
    ("mini-swe-agent-v2_deepseek-chat/*.traj.json", load_mini_v2),
    ("claude-code_opus-4-6/*.jsonl", load_claude_code),
    ("openhands-v0_multi-swe-bench/output.jsonl", load_openhands),
    ("swe-agent-v1_demo/*.traj", load_swe_agent),
    ("tau-bench_gpt-4o/*.json", load_tau_bench),
    ("tau2-bench_gpt-4.1/*.json", load_tau2_bench),
)


@functools.lru_cache(maxsize=4)
def _load_all(root: Path) -> tuple[Trajectory, ...]:
    found: list[Trajectory] = []
    for pattern, loader in LOADERS:
        for path in sorted(root.glob(pattern)):
            found.extend(loader(path))
    for traj in found:
        try:
            validate_sequence(traj.messages)
        except AssertionError as exc:
            raise AssertionError(f"{traj.name}: {exc}") from None
    return tuple(found)


def load_all(root: Path | None = None) -> list[Trajectory]:
    """Every trajectory of the corpus, validated (cached; do not mutate the result)."""
    return list(_load_all(Path(root) if root is not None else CORPUS_DIR))


def long_trajectories(root: Path | None = None) -> list[Trajectory]:
    """The long SWE and Claude Code ones: 70K-170K prompt tokens, 40-190 tool results."""
    return [t for t in load_all(root) if t.source in LONG_SOURCES]


def turns(traj: Trajectory) -> Iterator[tuple[list[Message], Message]]:
    """(the history a replaying client sends, the recorded reply) for each model turn.

    A turn is an assistant message with at least one non-system message before it; tau2's
    canned greeting (after the system prompt only) is not a model turn.
    """
    for i, msg in enumerate(traj.messages):
        if msg.get("role") != "assistant":
            continue
        if any(m.get("role") not in ("system", "developer") for m in traj.messages[:i]):
            yield traj.messages[:i], msg


def repeated_ids(messages: list[Message]) -> int:
    """How many tool results reuse a tool_call id seen earlier in the conversation."""
    counts = Counter(m.get("tool_call_id") for m in messages if m.get("role") == "tool")
    return sum(n - 1 for n in counts.values())


def describe(traj: Trajectory) -> dict[str, Any]:
    """Size and shape of one trajectory, in the terms of SOURCES.md section 2."""

    def text(content: Any) -> int:
        if isinstance(content, list):
            return sum(len(p.get("text") or "") for p in content)
        return len(content or "")

    tool_msgs = [m for m in traj.messages if m.get("role") == "tool"]
    calls = [c for m in traj.messages for c in m.get("tool_calls") or []]
    return {
        "messages": len(traj.messages),
        "tool_calls": len(calls),
        "tool_messages": len(tool_msgs),
        "repeated_ids": repeated_ids(traj.messages),
        "chars": sum(text(m.get("content")) for m in traj.messages)
        + sum(len(c["function"]["arguments"]) for c in calls),
        "tool_chars": sum(text(m.get("content")) for m in tool_msgs),
        "reasoning_chars": sum(
            len(m.get("reasoning") or "") + len(m.get("reasoning_content") or "")
            for m in traj.messages
        ),
        "turns": sum(1 for _ in turns(traj)),
        "reported_peak": traj.reported_peak,
    }
