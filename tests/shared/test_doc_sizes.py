"""Issue 39's bounds on the docs a newcomer reads: README at most 300 lines, docs/benchmarks.md
at most 400 and docs/device.md at most 500, and no lab-notebook "pass" sections (history is
git's: a figure is replaced, not appended)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUNDS = {"README.md": 300, "docs/benchmarks.md": 400, "docs/device.md": 500}
PASS_HEADING = re.compile(r"^#+ .*\bpass(es)?\b", re.IGNORECASE | re.MULTILINE)


@pytest.mark.parametrize(("name", "most"), sorted(BOUNDS.items()))
def test_doc_within_its_bound(name: str, most: int) -> None:
    lines = (ROOT / name).read_text().count("\n")
    assert lines <= most, f"{name}: {lines} lines, at most {most} (issue 39): move detail out"


@pytest.mark.parametrize(
    "name", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]
)
def test_no_pass_headings(name: str) -> None:
    path = ROOT / name if name == "README.md" else ROOT / "docs" / name
    found = PASS_HEADING.findall(path.read_text())
    heads = [m.group(0) for m in PASS_HEADING.finditer(path.read_text())]
    assert not found, f"{name}: lab-notebook headings {heads}: say what holds today instead"
