"""The core stays pure: no HTTP, server or storage library is imported by it.

Whole folders are guarded (`session/`, `compaction/`, `wire/`), so a module added to one is
checked without editing a list; beside them, the seed's modules and a few pure helpers at the
package's root or in the I/O folders.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import proxy

ROOT = Path(proxy.__file__).parent
PURE_FOLDERS = ("session", "compaction", "wire")
PURE_MODULES = (
    "conversation_message.py",
    "conversation.py",
    "compact.py",
    "rules.py",
    "trail.py",
    "artifacts.py",
    "code_names.py",
    "content_text.py",
    "setting_values.py",
    "upstream/providers.py",
)
CORE = sorted(
    {str(p.relative_to(ROOT)) for folder in PURE_FOLDERS for p in (ROOT / folder).rglob("*.py")}
    | set(PURE_MODULES)
)
FORBIDDEN = {"httpx", "starlette", "uvicorn", "sqlite3", "redis", "openai", "asyncio"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_guard_covers_whole_folders() -> None:
    for folder in PURE_FOLDERS:
        modules = [name for name in CORE if name.startswith(folder + "/")]
        assert len(modules) > 3, folder
    assert "wire/messages/bodies.py" in CORE and "session/rebuild.py" in CORE


@pytest.mark.parametrize("name", CORE)
def test_core_module_imports_no_io_library(name: str) -> None:
    path = ROOT / name
    assert imported_roots(path) & FORBIDDEN == set()


@pytest.mark.parametrize("name", CORE)
def test_core_module_stays_small(name: str) -> None:
    path = ROOT / name
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 400
