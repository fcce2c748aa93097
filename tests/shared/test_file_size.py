"""No tier file (device/, edge/, cloud/) over 600 lines (issue 39): a module that grows past
it is split by concern into sibling modules."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("device", "edge", "cloud")
MAX_LINES = 600


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_tier_file_over_the_limit() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): _lines(path)
        for tier in TIERS
        for path in sorted((ROOT / tier).rglob("*.py"))
        if "_pb2" not in path.name  # generated
    }
    assert len(sizes) > 50, "the tiers' modules were not found"
    too_long = {k: n for k, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"tier files over {MAX_LINES} lines (split them by concern): " + ", ".join(
        f"{k} ({n})" for k, n in sorted(too_long.items())
    )
