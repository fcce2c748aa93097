"""What ships with a model names no absolute path of the machine that built it."""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.shared.models import starter_repository
from strata.tools.portable import absolute_paths, portable, portable_text


def test_absolute_paths_are_cut_to_their_names() -> None:
    cmd = "strata models distill data/vtest.avi --into /home/a/runs/repo --student-weights /w/x.pt"
    assert (
        portable_text(cmd)
        == "strata models distill data/vtest.avi --into repo --student-weights x.pt"
    )
    kept = "https://github.com/o/r, ./rel/p, ~/p, a/b, 1/255, RGB /255, 3 / 4"
    assert portable_text(kept) == kept and absolute_paths(kept) == []
    nested = {"a": ["/tmp/q/file.json", 3], "b": ("/opt/x",), "c": None}
    assert portable(nested) == {"a": ["file.json", 3], "b": ("x",), "c": None}


@pytest.mark.parametrize("pattern", ["*/manifest.yaml", "*/MODEL_CARD.md", "distill.json", "*.md"])
def test_starter_repository_ships_no_absolute_path(pattern: str) -> None:
    files = sorted(Path(starter_repository()).glob(pattern))
    assert files, f"nothing matches {pattern}"
    for f in files:
        found = absolute_paths(f.read_text())
        assert found == [], f"{f.name} names paths of the building machine: {found}"
