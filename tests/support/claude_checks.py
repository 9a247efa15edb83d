"""What the Claude Code and Messages SDK tests read out of the fake's recorded requests.

Each helper takes request bodies (as `FakeMessages` recorded them) and returns plain facts, so
a test can state the issue's list one line per item, and `Checks` collects every failed item
before failing once: a run shows all that is missing, not just the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from proxy.settings import Settings
from tests.conftest import proxy_settings
from tests.support.claude_model import (
    PLACEHOLDER,
    is_own_compaction_request,
    is_proxy_summary_request,
)
from tests.support.fake_messages import (
    FakeMessages,
    block_text,
    cache_breakpoints,
    tool_pairing_errors,
)


def messages_settings(fake: FakeMessages, **overrides: Any) -> Settings:
    """A test proxy whose OpenAI and Anthropic upstreams are both the fake."""
    overrides.setdefault("anthropic_base_url", fake.base_url)
    return proxy_settings(fake, **overrides)


@dataclass
class Checks:
    """Named checks; `verify()` fails with the list of those that did not hold."""

    failed: list[str] = field(default_factory=list)

    def check(self, name: str, holds: bool, detail: Any = "") -> None:
        if not holds:
            self.failed.append(f"{name}{': ' + str(detail) if detail != '' else ''}")

    def verify(self) -> None:
        assert not self.failed, "failed checks:\n- " + "\n- ".join(self.failed)


def bodies(fake: FakeMessages) -> list[dict[str, Any]]:
    return [r.json for r in fake.messages_requests if isinstance(r.json, dict)]


def main_requests(fake: FakeMessages, tool: str = "Read") -> list[dict[str, Any]]:
    """The agent loop's requests: they offer the agent's tool; no summary or compaction."""
    return [
        body
        for body in bodies(fake)
        if any(t.get("name") == tool for t in body.get("tools") or [])
        and not is_own_compaction_request(body)
        and not is_proxy_summary_request(body)
    ]


def blocks(body: dict[str, Any], role: str, kind: str) -> list[dict[str, Any]]:
    found = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") == role and isinstance(content, list):
            found += [b for b in content if isinstance(b, dict) and b.get("type") == kind]
    return found


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return blocks(body, "user", "tool_result")


def is_placeholder(result: dict[str, Any]) -> bool:
    return PLACEHOLDER.search(block_text(result.get("content"))) is not None


def extract_rounds(body: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(extract tool_use, its tool_result or None) pairs in a request."""
    results = {r.get("tool_use_id"): r for r in tool_results(body)}
    return [
        (use, results.get(use.get("id")))
        for use in blocks(body, "assistant", "tool_use")
        if use.get("name") == EXTRACT_TOOL_NAME
    ]


def unsigned_thinking(fake: FakeMessages, body: dict[str, Any]) -> list[str]:
    """Thinking blocks of a request that the fake did not sign with exactly that text."""
    bad = []
    for block in blocks(body, "assistant", "thinking"):
        signature = block.get("signature") or ""
        if fake.signed.get(signature) != block.get("thinking"):
            bad.append(signature[:24])
    return bad


def request_problems(fake: FakeMessages) -> list[str]:
    """Anything Anthropic would refuse in the recorded requests, and every refusal answered."""
    problems = [f"{status}: {error['error']['message']}" for _, status, error in fake.refused]
    for number, body in enumerate(bodies(fake)):
        problems += [f"request {number}: {p}" for p in tool_pairing_errors(body)]
        if cache_breakpoints(body) > 4:
            problems.append(f"request {number}: {cache_breakpoints(body)} cache breakpoints")
        problems += [f"request {number}: bad signature {s}" for s in unsigned_thinking(fake, body)]
    return problems


def system_texts(body: dict[str, Any]) -> list[str]:
    system = body.get("system")
    if isinstance(system, str):
        return [system]
    return [b.get("text", "") for b in system or [] if isinstance(b, dict)]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or []]
