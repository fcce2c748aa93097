"""`strata bench store` runs its three points end to end (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from strata.tools.cli import main


def test_store_bench_measures_sqlite_and_one_and_two_replicas(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "store.json"
    assert (
        main(
            [
                "bench",
                "store",
                "--rounds",
                "1",
                "--events",
                "150",
                "--streams",
                "2",
                "--window",
                "4",
                "--url",
                pg_url,
                "--json",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    points = report["points"]
    assert [len(r) for r in report["rounds"]] == [1, 1, 1]
    assert [(p["store"], p["replicas"], p["events"]) for p in points] == [
        ("sqlite", 1, 150),
        ("postgresql", 1, 150),
        ("postgresql", 2, 300),
    ]
    assert all(p["events_per_s"] > 0 and p["p99_ms"] >= p["p50_ms"] for p in points)
    assert all(p["replica_cpu_us"] > 0 for p in points)
    assert all(p["server_cpu_us"] == -1 for p in points)  # an external server: not measured
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (450,)
