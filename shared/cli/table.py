"""Plain-text tables for command output: a header row, left-aligned padded columns.

Rows are held until `render` (column widths need every row); commands bound them with
their `--limit`. Cells never hold a newline or a tab, so `cut`, `awk` and the header's
column offsets read the table back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

GAP = "  "


def local_time(ns: int) -> str:
    """Nanoseconds since the epoch as local ISO 8601 with milliseconds and the UTC offset;
    "-" for 0 (unset)."""
    if ns <= 0:
        return "-"
    return datetime.fromtimestamp(ns / 1e9).astimezone().isoformat(timespec="milliseconds")


class Table:
    """Rows under named columns; `render` pads each column to its widest cell."""

    def __init__(self, columns: Sequence[str]) -> None:
        if any(not c or " " in c for c in columns):
            raise ValueError(f"column names are single words: {list(columns)}")
        self.columns = tuple(columns)
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: str) -> None:
        """One row, a cell per column ("" for none)."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(tuple(" ".join(c.split()) for c in cells))

    def lines(self) -> Iterator[str]:
        """The header, then each row; trailing blanks stripped."""
        widths = [len(c) for c in self.columns]
        for row in self.rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        for row in (self.columns, *self.rows):
            yield GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    def render(self) -> str:
        return "".join(line + "\n" for line in self.lines())


def parse(text: str) -> list[dict[str, str]]:
    """A rendered table read back by its header's column offsets (for tests and scripts)."""
    header, *rows = text.splitlines()
    names, starts, at = header.split(), [], 0
    for name in names:
        at = header.index(name, at)
        starts.append(at)
        at += len(name)
    ends = [*starts[1:], None]
    return [
        {n: row[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)} for row in rows
    ]
