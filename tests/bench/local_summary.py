"""A deterministic LOCAL summariser for the replay: no model, so replays are repeatable.

It answers the proxy's summary requests with the eight sections the proxy asks for, filled
from "key lines" of the messages: the first line of each message, and lines naming a file
path or an error. Lines are kept newest first until the budget (SUMMARY_MAX_TOKENS tokens) is
spent, then put back in order. A real model writes a better summary; this one only has the
size and the shape of one, which is what the token economy depends on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from proxy.compact import SUMMARY_MAX_TOKENS, SUMMARY_PROMPT


def is_summary_request(messages: list[dict[str, Any]]) -> bool:
    """The proxy's summary requests: SUMMARY_PROMPT as the first message (a standalone
    request), or as the start of the last user message (a request that reuses the session's
    cached prefix and appends the instruction)."""
    if not messages:
        return False
    if _text(messages[0].get("content")) == SUMMARY_PROMPT:
        return True
    last = messages[-1]
    return last.get("role") == "user" and _text(last.get("content")).startswith(SUMMARY_PROMPT)


LABEL = "deterministic local summariser (key lines: first line of each message + path/error lines)"
PATH = re.compile(
    r"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|js|ts|rs|go|c|h|java|md|json|toml|ya?ml|cfg|txt)\b"
)
ERROR = re.compile(r"error|exception|traceback|failed|failure|assert", re.IGNORECASE)
MAX_LINE = 160


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def key_lines(messages: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for msg in messages:
        role = str(msg.get("role"))
        text = _text(msg.get("content"))
        if role == "system":  # an earlier summary: carry its key lines forward as they are
            for line in text.splitlines():
                if line.startswith("- [") and line not in seen:
                    seen.add(line)
                    out.append(line)
            continue
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            text += f"\n{fn.get('name')}({str(fn.get('arguments'))[:MAX_LINE]})"
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        picked = lines[:1] + [ln for ln in lines[1:] if PATH.search(ln) or ERROR.search(ln)]
        for line in picked:
            line = line[:MAX_LINE]
            if line not in seen:
                seen.add(line)
                out.append(f"- [{role}] {line}")
    return out


def summarise(messages: list[dict[str, Any]], count: Callable[[str], int]) -> str:
    """The summary text for a summary request's messages (instruction messages included)."""
    body = list(messages)
    if body and _text(body[0].get("content")) == SUMMARY_PROMPT:
        body = body[1:]  # the instruction first, as a system message
    if body and body[-1].get("role") == "user":
        body = body[:-1]  # the closing request to write the summary (or the instruction)
    lines = key_lines(body)
    users = [m for m in body if m.get("role") == "user"]
    body_count = sum(1 for m in body if m.get("role") != "system")
    first_user = _text(users[0].get("content")).strip().splitlines()[:1] if users else []
    tools = sum(1 for m in body if m.get("role") == "tool")
    head = (
        "## system_context\nnone\n"
        f"## overview\n{body_count} earlier messages ({tools} tool results) were compacted."
        + (f" The task began: {first_user[0][:MAX_LINE]}" if first_user else "")
        + "\n## key_facts\n"
    )
    tail = (
        "\n## user_preferences\nnone\n## decisions\nnone\n## pending_tasks\n"
        "Continue from the latest messages.\n## open_questions\nnone\n## tone_context\n"
        "Technical and terse."
    )
    budget = SUMMARY_MAX_TOKENS - count(head) - count(tail)
    kept: list[str] = []
    for line in reversed(lines):  # newest first: recent facts matter most
        cost = count(line) + 1
        if cost > budget:
            break
        budget -= cost
        kept.append(line)
    return head + "\n".join(reversed(kept) or ["none"]) + tail
