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


# The folders in the order a request travels, highest first. A folder imports only folders
# of a lower rank: so no two folders import each other, and a lower one never a higher one.
# Admin stands beside the turn (the server mounts it; it rebuilds and compacts a stored
# session with the same lower folders). The session core sits under the wires, which build
# their neutral messages and the extract tool's answers with it.
RANKS = {
    "server": 0,
    "admin": 1,
    "turn": 1,
    "wire": 2,
    "compaction": 2,
    "upstream": 2,
    "session": 3,
    "store": 4,
}
SEED = ("conversation_message", "conversation", "compact", "rules", "trail", "artifacts")
WIRE_NAMES = {"chat", "responses", "messages"}


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANKS) else None


def _folder_imports() -> set[tuple[str, str, str, str]]:
    edges = set()
    for module, imported in _graph().items():
        for other in imported:
            a, b = _folder(module), _folder(other)
            if a is not None and b is not None and a != b:
                edges.add((a, b, module, other))
    return edges


def test_every_folder_of_the_package_has_a_rank() -> None:
    folders = {p.parent.relative_to(ROOT).parts[0] for p in ROOT.glob("*/__init__.py")}
    assert folders == set(RANKS)


def test_a_folder_imports_only_lower_folders() -> None:
    upward = [
        f"{module} -> {other}"
        for a, b, module, other in sorted(_folder_imports())
        if RANKS[a] >= RANKS[b]
    ]
    assert upward == []


def test_no_two_folders_import_each_other() -> None:
    pairs = {(a, b) for a, b, _, _ in _folder_imports()}
    assert {(a, b) for a, b in pairs if (b, a) in pairs} == set()


def test_the_seed_modules_import_no_folder() -> None:
    graph = _graph()
    for name in (*SEED, "errors"):
        assert {m for m in graph[f"proxy.{name}"] if _folder(m)} == set(), name


def test_one_apis_folder_imports_no_other_apis_folder() -> None:
    for module, imported in _graph().items():
        parts = module.split(".")
        if parts[:2] == ["proxy", "wire"] and len(parts) > 3:
            for other in imported:
                o = other.split(".")
                assert not (o[:2] == ["proxy", "wire"] and len(o) > 3 and o[2] != parts[2]), (
                    f"{module} -> {other}"
                )


def test_the_apis_folders_name_their_shared_jobs_alike() -> None:
    # The jobs every API has: its adapter, what a round produced and rounds merged into one
    # reply, the streamed relay, a whole answer to a stream request.
    shared = {"adapter", "reply", "stream", "whole"}
    for name in sorted(WIRE_NAMES):
        modules = {p.stem for p in (ROOT / "wire" / name).glob("*.py")}
        assert shared <= modules, f"proxy/wire/{name} lacks {sorted(shared - modules)}"


def _branches_on_a_wire_name(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for side in sides:
                values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                if any(isinstance(v, ast.Constant) and v.value in WIRE_NAMES for v in values):
                    found.append(ast.unparse(node))
        elif isinstance(node, ast.match_case) and ast.unparse(node.pattern).strip("'\"") in (
            WIRE_NAMES
        ):
            found.append(ast.unparse(node.pattern))
    return found


def test_no_branch_on_a_wires_name_outside_wire() -> None:
    found = {
        str(path.relative_to(ROOT)): hits
        for path in ROOT.rglob("*.py")
        if path.relative_to(ROOT).parts[0] != "wire"
        and (hits := _branches_on_a_wire_name(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_branch_finder_sees_a_branch() -> None:
    tree = ast.parse('if wire.name == "messages":\n    pass\nok = name in ("chat", "x")')
    assert len(_branches_on_a_wire_name(tree)) == 2


def test_no_module_runs_past_400_lines() -> None:
    # The house style's size: a module past it is split along the lines its docstring draws.
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


def _names_outside_the_api_folders() -> dict[str, list[str]]:
    """File name -> where it is, for every module outside proxy/wire/<api>/ (`__init__`,
    `__main__` and `base` aside: those are roles every folder may have)."""
    api_folders = {ROOT / "wire" / name for name in WIRE_NAMES}
    where: dict[str, list[str]] = {}
    for p in sorted(ROOT.rglob("*.py")):
        if p.parent in api_folders or p.stem in {"__init__", "__main__", "base"}:
            continue
        where.setdefault(p.stem, []).append(str(p.relative_to(ROOT)))
    return where


def test_no_two_modules_share_a_name_outside_the_api_folders() -> None:
    # `savings.py` in three folders tells a reader nothing about which to open.
    shared = {
        stem: paths for stem, paths in _names_outside_the_api_folders().items() if len(paths) > 1
    }
    assert shared == {}


def test_no_module_sits_beside_its_own_plural() -> None:
    beside = [
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if (p.parent / f"{p.stem}s.py").exists()
    ]
    assert beside == []


def test_the_api_folders_name_the_same_job_alike() -> None:
    # A job two APIs share has one name: a module name in two API folders is the same job, so
    # the folders' names are the same set, bar what one API alone needs (its own tool
    # definition, its content blocks, its thinking binding, checks of its requests).
    own = {
        "chat": {"checks"},
        "responses": {"tool", "bodies", "to_neutral", "from_neutral"},
        "messages": {"binding", "content", "checks", "bodies", "to_neutral", "from_neutral"},
    }
    for name in sorted(WIRE_NAMES):
        modules = {p.stem for p in (ROOT / "wire" / name).glob("*.py")} - {"__init__"}
        assert modules - own.get(name, set()) == {"adapter", "reply", "stream", "whole"}, name


def test_at_most_a_dozen_modules_at_the_root() -> None:
    names = {p.stem for p in ROOT.glob("*.py")} - {"__init__", "__main__"}
    assert set(SEED) <= names and {"cli", "settings", "errors"} <= names
    assert len(names) <= 12, sorted(names)


def test_the_cache_aware_strategy_loads_by_its_path_and_leaves_no_alias() -> None:
    from proxy.compaction.cache_aware import CacheAwareCompactor
    from proxy.server.app import load_compactor
    from proxy.settings import Settings

    path = "proxy.compaction.cache_aware:CacheAwareCompactor"
    assert type(load_compactor(Settings(compactor=path))) is CacheAwareCompactor
    assert not (ROOT / "cache_compact.py").exists()  # the project never had a release


def test_no_function_runs_past_80_lines() -> None:
    long = {
        f"{p.relative_to(ROOT)}:{node.name}": node.end_lineno - node.lineno + 1
        for p in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 80
    }
    assert long == {}


def _handed_on(tree: ast.Module) -> list[str]:
    """Names a module hands on without defining them: in `__all__`, or `import x as x`."""
    defined: set[str] = set()
    listed: list[str] = []
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defined.add(name.id)
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert isinstance(node.value, ast.List)
                listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.ImportFrom):
            found += [a.name for a in node.names if a.asname == a.name]
    return found + [name for name in listed if name not in defined]


def test_no_module_in_a_folder_hands_on_names_it_does_not_define() -> None:
    # The store's package face is its public API, as the seed's modules at the root are.
    handed_on = {
        str(p.relative_to(ROOT)): names
        for p in ROOT.rglob("*.py")
        if len(p.relative_to(ROOT).parts) > 1 and p.relative_to(ROOT) != Path("store/__init__.py")
        if (names := _handed_on(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert handed_on == {}
