"""shared/cli/table.py: headers, padded columns, local ISO times, read back by offsets."""

from __future__ import annotations

from datetime import datetime

import pytest
from strata.shared.cli.table import Table, local_time, parse


def test_columns_are_padded_to_their_widest_cell_and_read_back() -> None:
    t = Table(["ID", "LABEL", "VERDICT"])
    t.add("1", "person", "abstained (no person class)")
    t.add("12345", "car", "")
    lines = t.render().splitlines()
    assert lines[0] == "ID     LABEL   VERDICT"
    assert lines[2] == "12345  car"  # trailing blanks stripped
    assert parse(t.render()) == [
        {"ID": "1", "LABEL": "person", "VERDICT": "abstained (no person class)"},
        {"ID": "12345", "LABEL": "car", "VERDICT": ""},
    ]


def test_a_cell_never_breaks_its_row() -> None:
    t = Table(["A", "B"])
    t.add("x\ty", "two\nlines")
    assert parse(t.render()) == [{"A": "x y", "B": "two lines"}]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="single words"):
        Table(["TWO WORDS"])
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        Table(["A", "B"]).add("x")


def test_local_time_is_iso_with_the_offset() -> None:
    ns = 1_700_000_000_123_456_789
    text = local_time(ns)
    parsed = datetime.fromisoformat(text)
    assert parsed.utcoffset() is not None and text.endswith(parsed.strftime("%z")[:3] + ":" +
                                                            parsed.strftime("%z")[3:])  # fmt: skip
    assert abs(parsed.timestamp() - ns / 1e9) < 1e-3
    assert ".123" in text
    assert local_time(0) == "-"
