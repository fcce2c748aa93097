"""Where the project's real test clip is: data/vtest.mp4 (`python .ci/test_data.py`)."""

from __future__ import annotations

from pathlib import Path


def find_vtest(explicit: str | None) -> Path | None:
    """The real test clip, if it is here (`explicit` when given)."""
    if explicit:
        return Path(explicit)
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        path = base / "data" / "vtest.mp4"
        if path.is_file():
            return path
    return None
