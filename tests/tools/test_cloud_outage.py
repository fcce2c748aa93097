"""The real daemons: `kill -9` of the cloud while crops flow loses none of them (issue 11.6)."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from strata.tools.demo.scrape import scrape
from strata.tools.demo.stack import Camera, Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def stored_crops(db: Path) -> int:
    """Distinct crops in the cloud's SQLite store (read-only, beside the running writer)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(DISTINCT crop_id) FROM events").fetchone()[0])
    finally:
        conn.close()


def test_cloud_killed_while_crops_flow_loses_none(tmp_path: Path, vtest_mp4: Path) -> None:
    stack = Stack(
        workdir=tmp_path / "run",
        cameras=[Camera("cam", str(vtest_mp4))],
        extra_config={
            "device": {"source": {"realtime": True}},
            "edge": {
                # Every detection goes to the cloud, a small memory buffer: the spool works.
                # Crops of every frame (not one look per tracked object): a steady flow.
                "crops": {
                    "score_min": 0.25,
                    "score_max": 1.0,
                    "max_per_frame": 4,
                    "track_interval_s": 0.0,
                    "track_change_iou": 1.0,
                    "track_score_change": 0.0,
                    "max_per_track": 100000,
                },
                "uplink": {"queue": 8, "open_s": 1.0, "connect_timeout_s": 0.5},
            },
        },
    )
    edge_metrics = stack.metrics_url("edge")

    def edge(name: str, **labels: str) -> float:
        got = scrape(edge_metrics, timeout=2.0)
        return got.total(name, **labels) if got is not None else -1.0

    try:
        stack.start_servers()
        stack.start_device()
        deadline = time.monotonic() + 40
        while edge("strata_edge_crops_total", status="stored") < 5:
            assert time.monotonic() < deadline, "no crop reached the cloud"
            time.sleep(0.2)
        cloud_pid = stack.procs["cloud"].pid
        assert cloud_pid is not None
        os.kill(cloud_pid, signal.SIGKILL)  # the cloud dies mid-stream
        offered_at_kill = edge("strata_edge_crops_total", status="offered")
        time.sleep(6.0)  # crops keep coming; they wait in memory and the spool
        assert edge("strata_edge_crops_total", status="offered") > offered_at_kill + 10
        assert edge("strata_edge_uplink_spool_crops") > 0
        stack.procs["device"].stop()  # a fixed set of crops from here on
        offered = edge("strata_edge_crops_total", status="offered")
        stack._start("cloud")  # the same store file: acked events survived the kill
        stack.wait_metrics("cloud", 60)
        db = stack.workdir / "events.sqlite"
        deadline = time.monotonic() + 60
        while stored_crops(db) < offered:
            assert time.monotonic() < deadline, (stored_crops(db), offered)
            time.sleep(0.5)
        drops = {
            reason: edge("strata_edge_drops_total", reason=reason)
            for reason in ("uplink_spool_full", "crop_buffer_full", "uplink_spool_error")
        }
        assert all(v <= 0 for v in drops.values()), drops
        print(f"offered {offered:.0f}, stored {stored_crops(db)}")
        assert stored_crops(db) == offered  # every crop offered is stored, once
        assert edge("strata_edge_breaker_trips_total") >= 1
    finally:
        stack.stop()
