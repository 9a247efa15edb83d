"""The core stays pure: no HTTP, server or storage library is imported by it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import proxy

CORE = [
    "conversation_message.py",
    "conversation.py",
    "compact.py",
    "rules.py",
    "trail.py",
    "artifacts.py",
    "session.py",
    "history.py",
    "session_state.py",
    "fingerprint.py",
    "merge.py",
    "economics.py",
    "cache_compact.py",
    "escalation.py",
    "windows.py",
    "hosts.py",
    "providers.py",
    "setting_values.py",
    "extract_tool.py",
    "relay.py",
    "sse.py",
    "summarizer.py",
    "turn_log.py",
    "json_limits.py",
    "identity.py",
    "upstream_reply.py",
    "wire/base.py",
    "wire/chat.py",
    "wire/responses.py",
    "wire/messages.py",
]
FORBIDDEN = {"httpx", "starlette", "uvicorn", "sqlite3", "redis", "openai", "asyncio"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("name", CORE)
def test_core_module_imports_no_io_library(name: str) -> None:
    path = Path(proxy.__file__).parent / name
    assert imported_roots(path) & FORBIDDEN == set()


@pytest.mark.parametrize("name", CORE)
def test_core_module_stays_small(name: str) -> None:
    path = Path(proxy.__file__).parent / name
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 400
