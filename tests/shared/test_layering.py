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
