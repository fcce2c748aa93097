"""No import cycle between modules, not even one hidden by an import inside a function.

Every `import` counts wherever it stands (module level or in a function), except under
`if TYPE_CHECKING:` (never run). A registry that imports a back end by name (importlib, as
shared/runtime/__init__.py and cloud/store/registry.py do) is no edge: the back end may import the
registry's interface, never the registry itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("device", "cloud", "shared")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that the file at `path` imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return _imports_in(path.read_text(), name, package, modules)


def _imports_in(source: str, name: str, package: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that module `name` (in `package`) imports in `source`."""
    tree = ast.parse(source, name)
    skipped = _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name.removeprefix("strata.") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = (node.module or "").removeprefix("strata.")
            # `from pkg import mod` needs the module mod; `from pkg import name`, pkg itself.
            subs = [f"{stem}.{a.name}" for a in node.names]
            targets = [t if t in modules else stem for t in subs]
        found.update(t for t in targets if t in modules and t != name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    paths = sorted((ROOT / package).rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports(p, modules) for p in paths}
    assert not _cycles(graph), f"import cycles in {package}/: {_cycles(graph)}"


def test_the_check_sees_a_cycle_hidden_in_a_function() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    modules = {"cloud", "cloud.store", "cloud.sqlite_store", "cloud.event_store"}
    hidden = "def f():\n    from .store import X\n"
    assert _imports_in(hidden, "cloud.sqlite_store", "cloud", modules) == {"cloud.store"}
    typing_only = "if TYPE_CHECKING:\n    from .store import X\nfrom . import event_store\n"
    found = _imports_in(typing_only, "cloud.sqlite_store", "cloud", modules)
    assert found == {"cloud.event_store"}
