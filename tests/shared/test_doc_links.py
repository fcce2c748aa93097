"""Every relative link in README.md and docs/*.md points to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); the target up to a space, ')' or '#'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s#]*)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")


def relative_links(text: str) -> list[str]:
    """Link targets that are paths (no scheme, no bare anchors), outside code blocks."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [t for t in LINK.findall(prose) if t and not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_the_link_pattern_finds_what_a_reader_clicks() -> None:
    text = "see [a](docs/a.md#x), ![p](p.png) and [w](https://x.org)\n```\n[c](c.md)\n```"
    assert relative_links(text) == ["docs/a.md", "p.png"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(doc: Path) -> None:
    missing = [t for t in relative_links(doc.read_text()) if not (doc.parent / t).exists()]
    assert missing == [], f"{doc.relative_to(ROOT)} links to missing files: {missing}"
