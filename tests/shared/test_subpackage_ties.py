"""At most one two-way tie between the sub-packages of a tier (issue 39).

A tier's nodes are its top-level modules and sub-packages (edge/metrics.py is one node,
edge/inference/ another; the tier's own __init__.py is the node "__init__"). Node A ties
with node B when a module of A imports a module of B and a module of B one of A. Every
import counts: module level, inside a function, and under `if TYPE_CHECKING:` (a type
import still means the two packages know each other).

edge/: its stage packages are leaves; what runs them (edge/drivers/) and what wires them
(build.py, node.py) import them, never the other way. No tie is allowed there.

device/ and cloud/ are grouped by concern the same way (device: capture, filters,
transport, clips; cloud: api, store, classify, client, outbox, console); the modules that
run them (device/agent.py, camera.py, pipeline.py; cloud/server.py, cli.py) sit above.
Their count is a ratchet: at most what there is today (TIES_TODAY, none), never raised.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("device", "edge", "cloud")
# The ties each tier has today, each with its reason; a new one fails the test.
TIES_TODAY: dict[str, set[tuple[str, str]]] = {"device": set(), "edge": set(), "cloud": set()}


def _node_of(tier: str, module: str) -> str | None:
    """The node (top-level module or sub-package) of dotted `module`, None outside `tier`."""
    parts = module.removeprefix("strata.").split(".")
    if parts[0] != tier:
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every dotted module (or module.name) that `module`'s source imports, anywhere in it."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found.update(a.name.removeprefix("strata.") for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = (node.module or "").removeprefix("strata.")
            # `from strata.edge import metrics` imports the node metrics, not edge/__init__.
            found.update(f"{stem}.{a.name}" for a in node.names)
    return found


def _graph(tier: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Node -> the other nodes of the tier that it imports."""
    top = root / tier
    nodes = {p.stem if p.is_file() else p.name for p in top.iterdir()}
    graph: dict[str, set[str]] = {}
    for path in sorted(top.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        is_package = rel.name == "__init__"
        module = ".".join(rel.parts[:-1] if is_package else rel.parts)
        own = _node_of(tier, module) or "__init__"
        if own != "__init__" and own not in nodes:
            continue
        targets = graph.setdefault(own, set())
        for imported in _imported_modules(path.read_text(), module, is_package):
            node = _node_of(tier, imported)
            if node is None:
                continue
            if node not in nodes:
                # `from strata.edge import X` where X is a name of edge/__init__.py.
                node = "__init__"
            if node != own:
                targets.add(node)
    return graph


def two_way_ties(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The pairs (a, b), a < b, that import each other."""
    return {(a, b) for a, out in graph.items() for b in out if a < b and a in graph.get(b, ())}


def _report(tier: str) -> str:
    graph = _graph(tier)
    ties = sorted(two_way_ties(graph))
    lines = [f"{tier}/: {len(ties)} two-way ties"]
    for a, b in ties:
        lines.append(f"  {a} <-> {b}")
    return "\n".join(lines)


@pytest.mark.parametrize("tier", TIERS)
def test_no_new_two_way_tie(tier: str) -> None:
    ties = two_way_ties(_graph(tier))
    new = ties - TIES_TODAY[tier]
    assert not new, f"new two-way ties in {tier}/: {sorted(new)}\n{_report(tier)}"
    assert len(ties) <= 1, _report(tier)


def test_the_edge_stages_are_leaves_of_the_drivers() -> None:
    graph = _graph("edge")
    stages = ("ingest", "flow", "inference", "tracking", "rules", "publish", "overload")
    for stage in (*stages, "uplink", "state"):
        assert "drivers" not in graph[stage], f"edge/{stage} imports edge/drivers"
    assert {"ingest", "flow", "inference", "tracking", "publish", "overload"} <= graph["drivers"]


def test_the_check_sees_a_tie(tmp_path: Path) -> None:
    tier = tmp_path / "edge"
    (tier / "a").mkdir(parents=True)
    (tier / "b").mkdir()
    (tier / "__init__.py").write_text("")
    (tier / "a" / "__init__.py").write_text("")
    (tier / "b" / "__init__.py").write_text("")
    (tier / "a" / "x.py").write_text("def f():\n    from strata.edge.b.y import Y\n")
    (tier / "b" / "y.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import x\n"
    )
    (tier / "c.py").write_text("from strata.edge import a\nfrom . import b\n")
    graph = _graph("edge", tmp_path)
    assert graph["a"] == {"b"} and graph["b"] == {"a"} and graph["c"] == {"a", "b"}
    assert two_way_ties(graph) == {("a", "b")}


if __name__ == "__main__":
    for name in TIERS:
        print(_report(name))
