"""`strata bench console --quick` fills a SQLite store and a real PostgreSQL, times the
console's requests through its ASGI app and checks a thumbnail's caching headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from required_testkit import missing
from strata.tools.cli import main
from strata.tools.postgres_temp import find_bindir

pytestmark = pytest.mark.timeout(240)

REQUESTS = ["first", "first_html", "filtered", "filtered_crops", "deep", "track", "counts_week"]


def test_quick_console_bench_over_both_stores(tmp_path: Path) -> None:
    if find_bindir() is None:
        missing("PostgreSQL server binaries not found (bash .ci/system-deps)")
    out = tmp_path / "out"
    argv = ["bench", "console", "--quick", "--out", str(out), "--json", str(tmp_path / "c.json")]
    rc = main(argv)
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc == json.loads((out / "console.json").read_text())
    assert rc == (0 if doc["targets_met"] and doc["thumbnails_cached"] else 1)
    assert [p["store"] for p in doc["points"]] == ["sqlite", "postgresql"]
    for p in doc["points"]:
        # 833 tracks of 4 track events and 2 crops each.
        assert (p["events"], p["crops"], p["track_events"]) == (4998, 1666, 3332)
        got = {t["name"]: t for t in p["timings"]}
        assert list(got) == REQUESTS
        assert all(t["status"] == 200 for t in p["timings"])
        # Full pages of 50: the first and page 50 (2,450 rows deep) alike.
        assert got["first"]["rows"] == got["deep"]["rows"] == got["filtered_crops"]["rows"] == 50
        # cam-3's cars: tracks 8j + 3 with j % 4 == 1, one crossing each (j < 104).
        assert got["filtered"]["rows"] == 26
        # Objects, zone entries and crossings in and out: series of the week's counts.
        assert got["counts_week"]["rows"] > 0
        for t in p["timings"]:
            assert 0 < t["p50_ms"] <= t["p99_ms"] <= t["max_ms"]
            assert (t["ok"] is None) == (t["target_ms"] is None)
        thumb = p["thumbnail"]
        assert thumb["status"] == "200" and thumb["content_type"] == "image/jpeg"
        assert "max-age=" in thumb["cache_control"] and thumb["etag"].startswith('"')
    md = (out / "console.md").read_text()
    assert md.count("| sqlite |") == md.count("| postgresql |") == len(REQUESTS)
