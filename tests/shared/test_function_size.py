"""No function or method in the code over 80 lines, except those listed here with why.

Length is the whole definition (`end_lineno - lineno + 1`, docstring and decorators'
lines after `def` included); a nested function counts on its own and inside its parent.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("device", "edge", "cloud", "shared", "tools")
MAX_LINES = 80

# "path::Qualified.name" -> why it may be longer.
ALLOWED: dict[str, str] = {
    "device/metrics.py::DeviceMetrics.__init__": "metric declarations, one per statement",
    "cloud/metrics.py::CloudMetrics.__init__": "metric declarations, one per statement",
    "shared/runtime/tensorrt_runner.py::TensorRTRunner.__init__": (
        "engine load, profile and buffer plan; splitting it needs a GPU run to check"
    ),
    "tools/bench/routing.py::measure": "benchmark driver; regrouped with tools/bench",
    "tools/bench/schednode.py::run_policy": "simulation driver; regrouped with tools/bench",
    "tools/bench/schedsim.py::simulate": "simulation driver; regrouped with tools/bench",
    "edge/metrics.py::EdgeMetrics.__init__": "metric declarations, one per statement",
    "tools/bench/outage.py::measure": "benchmark driver",
    "tools/bench/console.py::_track_rows": "benchmark data: one row of every column, in order",
}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def _long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for tier in TIERS:
        for path in sorted((ROOT / tier).rglob("*.py")):
            if "_pb2" in path.name:
                continue  # generated
            rel = path.relative_to(ROOT).as_posix()
            for name, lines in _functions(ast.parse(path.read_text(), rel)):
                if lines > MAX_LINES:
                    found[f"{rel}::{name}"] = lines
    return found


def test_no_function_over_the_limit() -> None:
    too_long = {k: n for k, n in _long_functions().items() if k not in ALLOWED}
    assert not too_long, (
        f"functions over {MAX_LINES} lines (split them, or list them in ALLOWED with why): "
        + ", ".join(f"{k} ({n} lines)" for k, n in sorted(too_long.items()))
    )


def test_allow_list_has_no_stale_entries() -> None:
    """An entry whose function is gone or now short goes, so the list only shrinks."""
    stale = sorted(set(ALLOWED) - set(_long_functions()))
    assert not stale, f"remove from ALLOWED (gone or within {MAX_LINES} lines): {stale}"


def test_the_measure_counts_whole_definitions() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    src = f"class A:\n    def f(self) -> None:\n{body.replace('    ', '        ')}\n"
    assert dict(_functions(ast.parse(src))) == {"A.f": MAX_LINES + 1}
