"""Long OpenHands-style sessions with many file views, for the artifact trail's worst case.

The corpus's OpenHands trajectories are short (19k-33k tokens at their peak, a handful of
files): the trail never has more paths than its budget holds. Real OpenHands sessions run
for hundreds of steps over a large tree, mostly `str_replace_editor` `view`s of one file after
another, with `execute_bash` searches and builds between them and a few edits. These are
generated, deterministically (a seeded RNG), in that shape: the system prompt and tools of an
OpenHands agent, one tool call per assistant turn, `view` results as `cat -n` output of 1-4k
characters, bash results ending in OpenHands' exit-code line.

    Trajectory objects as `tests.support.corpus` makes them; `python -m tests.bench.trail
    --synthetic 3` adds three to the run.
"""

from __future__ import annotations

import json
import random
from typing import Any

from tests.support.corpus import Trajectory

ROOT = "/workspace/ponylang__ponyc__0.1"
DIRS = (
    "src/libponyc/ast",
    "src/libponyc/codegen",
    "src/libponyc/expr",
    "src/libponyc/pass",
    "src/libponyc/type",
    "src/libponyc/reach",
    "src/libponyrt/sched",
    "src/libponyrt/mem",
    "src/libponyrt/actor",
    "test/libponyc",
    "packages/builtin",
    "packages/collections",
)
STEMS = (
    "ast", "frame", "parser", "lexer", "token", "symtab", "genexpr", "gencall", "genfun",
    "genoperator", "gentype", "call", "control", "lambda", "literal", "match", "operator",
    "postfix", "reference", "expr", "flatten", "names", "refer", "sugar", "syntax", "traits",
    "verify", "alias", "assemble", "cap", "compattype", "lookup", "matchtype", "reify",
    "safeto", "subtype", "typeparam", "viewpoint", "reach", "paint", "subtype_test",
    "scheduler", "mpmcq", "heap", "pool", "pagemap", "actor", "messageq",
)  # fmt: skip
EXTS = (".c", ".h", ".cc", ".pony")
CODE = (
    "  ast_t* child = ast_child(ast);",
    "  return type_cap(t);",
    "}",
    "",
    "  if(ast_id(ast) == TK_NONE)",
    "    pony_assert(0);",
    "static bool check(pass_opt_t* opt)",
)
SYSTEM = (
    "You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve "
    "tasks.\n<ROLE>Your primary role is to assist users by executing commands, modifying code, "
    "and solving technical problems effectively.</ROLE>\n"
    + "<GUIDELINE>Be thorough.</GUIDELINE>\n"
    * 20
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "execute_bash",
            "description": "Execute a bash command in the terminal.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": "Custom editing tool for viewing, creating and editing files.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                    "path": {"type": "string"},
                    "view_range": {"type": "array", "items": {"type": "integer"}},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["command", "path"],
            },
        },
    },
]


def _files(rng: random.Random, count: int) -> list[str]:
    files: set[str] = set()
    while len(files) < count:
        files.add(f"{ROOT}/{rng.choice(DIRS)}/{rng.choice(STEMS)}{rng.choice(EXTS)}")
    return sorted(files)


def _listing(path: str, rng: random.Random, start: int = 1) -> str:
    lines = [f"Here's the result of running `cat -n` on {path}:"]
    for n in range(start, start + rng.randint(40, 110)):
        code = rng.choice(CODE)
        lines.append(f"{n:6}\t{code}")
    return "\n".join(lines)


def _call(n: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"toolu_{n:03d}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def trajectory(seed: int, steps: int = 200, files: int = 150) -> Trajectory:
    """One session: `steps` tool turns over a tree of `files` files, most of them viewed."""
    rng = random.Random(seed)
    tree = _files(rng, files)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": f"<uploaded_files>\n{ROOT}\n</uploaded_files>\nFix the crash when a "
            "lambda captures a field of `this` in a constructor. Do not modify the tests.",
        },
    ]
    for n in range(steps):
        roll = rng.random()
        if roll < 0.72:
            path = tree[n % len(tree)] if n < len(tree) else rng.choice(tree)
            args: dict[str, Any] = {"command": "view", "path": path}
            if rng.random() < 0.3:
                start = rng.randint(1, 400)
                args["view_range"] = [start, start + 60]
            name, result = "str_replace_editor", _listing(path, rng)
        elif roll < 0.92:
            target = rng.choice(tree)
            command = rng.choice(
                (f"grep -rn 'ast_child' {ROOT}/{rng.choice(DIRS)} | head -40",
                 f"cd {ROOT} && find {rng.choice(DIRS)} -name '*.c' | head",
                 f"cd {ROOT} && make -j2 test 2>&1 | tail -20",
                 f"sed -n '100,160p' {target}")
            )  # fmt: skip
            status = rng.choice((0, 0, 0, 1, 2))
            body = "\n".join(
                f"{rng.choice(tree)}:{rng.randint(1, 900)}: ast_child(ast)" for _ in range(12)
            )
            name, args = "execute_bash", {"command": command}
            result = f"{body}\n[The command completed with exit code {status}.]"
        else:
            path = rng.choice(tree)
            args = {
                "command": "str_replace",
                "path": path,
                "old_str": "  return type_cap(t);",
                "new_str": "  return type_cap(t == NULL ? def : t);",
            }
            name = "str_replace_editor"
            result = f"The file {path} has been edited. Here's the result of running `cat -n`:"
        call = _call(n, name, args)
        messages.append(
            {"role": "assistant", "content": f"Step {n}: looking further.", "tool_calls": [call]}
        )
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    messages.append({"role": "assistant", "content": "The fix is in place and the tests pass."})
    return Trajectory(f"synthetic/openhands-views-{seed}", "synthetic", messages, TOOLS, None)


def trajectories(count: int) -> list[Trajectory]:
    return [trajectory(seed) for seed in range(1, count + 1)]
