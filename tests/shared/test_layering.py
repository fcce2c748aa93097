"""The layering the design promises: a tier never imports another tier or the tools.

shared/ imports no tier and no tool; each tier imports only shared/; tools/ may import all.
Checked on the source (every `import strata.X` / `from strata.X`), so it fails on the line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*(?:from|import)\s+strata\.(\w+)", re.MULTILINE)
ALLOWED = {
    "shared": {"shared"},
    "device": {"shared", "device"},
    "edge": {"shared", "edge"},
    "cloud": {"shared", "cloud"},
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    bad = []
    for path in (ROOT / package).rglob("*.py"):
        for match in IMPORT.finditer(path.read_text()):
            if match.group(1) not in ALLOWED[package]:
                line = path.read_text()[: match.start()].count("\n") + 1
                bad.append(f"{path.relative_to(ROOT)}:{line} imports strata.{match.group(1)}")
    assert not bad, "\n".join(bad)


# The edge's wiring: it builds and runs the stages (drivers/: the ingest and worker
# threads), so no stage may import it.
EDGE_WIRING = {"node", "build", "cli", "drivers"}
EDGE_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+(?:strata\.edge\.(\w+)|strata\.edge\s+import\s+(\w+)|\.+(\w+))",
    re.MULTILINE,
)


def test_no_edge_stage_imports_the_wiring() -> None:
    bad = []
    for path in (ROOT / "edge").rglob("*.py"):
        rel = path.relative_to(ROOT / "edge")
        if rel.parts[0].removesuffix(".py") in EDGE_WIRING:
            continue
        text = path.read_text()
        for match in EDGE_IMPORT.finditer(text):
            name = match.group(1) or match.group(2) or match.group(3)
            if name in EDGE_WIRING:
                line = text[: match.start()].count("\n") + 1
                bad.append(f"edge/{rel}:{line} imports strata.edge.{name}")
    assert not bad, "\n".join(bad)
