"""The package's layout: no import cycles between the proxy's modules, and the store's
contract imports none of its implementations."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy

ROOT = Path(proxy.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, known: set[str]) -> set[str]:
    """Modules of the package imported at top level (not under `if TYPE_CHECKING:`)."""
    found: set[str] = set()
    body = tree.body if isinstance(tree, ast.Module) else []
    for node in body:
        if _type_checking_only(node):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                names = [sub.module] + [f"{sub.module}.{a.name}" for a in sub.names]
                found.update(n for n in names if n in known)
            elif isinstance(sub, ast.Import):
                found.update(a.name for a in sub.names if a.name in known)
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                break  # imports inside functions run late, on demand
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(files)
    return {
        name: _imports(ast.parse(path.read_text(encoding="utf-8")), known) - {name}
        for name, path in files.items()
    }


def test_no_import_cycle_between_the_proxys_modules() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue  # a package and its own modules
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_store_contract_imports_no_store() -> None:
    graph = _graph()
    assert not {m for m in graph["proxy.store.base"] if m.startswith("proxy.store.")}


def test_the_core_seed_modules_import_no_compactor() -> None:
    graph = _graph()
    for module in ("proxy.conversation", "proxy.conversation_message", "proxy.rules"):
        assert "proxy.compact" not in graph[module], module
