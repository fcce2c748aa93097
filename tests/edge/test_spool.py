"""The uplink's disk spool: order, bound, restart; a cloud outage loses no crop."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.breaker import BreakerState
from strata.edge.uplink.spool import CropSpool
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2
from strata.shared.metrics import sample
from test_edge_uplink import Cloud, serve, wait_for

pytestmark = pytest.mark.timeout(60)


def crops(n: int, start: int = 0, size: int = 2000) -> list[analytics_pb2.Crop]:
    image = os.urandom(size)  # incompressible, like a JPEG
    return [
        analytics_pb2.Crop(crop_id=f"c{i:06d}", camera_id="cam", sequence=i + 1, image=image)
        for i in range(start, start + n)
    ]


def ids(cs: list[analytics_pb2.Crop]) -> list[str]:
    return [c.crop_id for c in cs]


def test_spool_is_fifo_with_a_front_bounded_and_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "s" / "spool.sqlite")
    one = len(crops(1)[0].SerializeToString())
    spool = CropSpool(path, max_bytes=10 * one)
    assert spool.push(crops(4)) == 0
    assert spool.push(crops(2, start=4)) == 0
    got, bad = spool.pop(3)
    assert ids(got) == ["c000000", "c000001", "c000002"] and bad == 0
    assert spool.push(got[1:], front=True) == 0  # unacked ones go back before the rest
    got, _ = spool.pop(2)
    assert ids(got) == ["c000001", "c000002"]
    assert spool.push(crops(8, start=6)) == 1  # 12 would not fit: the oldest goes
    assert len(spool) == 10 and spool.bytes <= 10 * one
    from strata.edge.uplink.spool import SpoolError

    with pytest.raises(SpoolError, match="in use by another edge process"):
        CropSpool(path, max_bytes=10 * one)
    spool.close()
    again = CropSpool(path, max_bytes=10 * one)
    got, _ = again.pop(100)
    assert ids(got) == [f"c{i:06d}" for i in range(4, 14)]
    assert len(again) == 0
    # A row that is not a crop is dropped and reported, not a crash.
    again.push(crops(1, start=20))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE crops SET data = x'ffffffff'")
    conn.commit()
    conn.close()
    got, bad = again.pop(5)
    assert got == [] and bad == 1
    again.close()


def make(port: int, tmp_path: Path, **over: Any) -> tuple[Uplink, EdgeMetrics]:
    metrics = EdgeMetrics()
    cfg = UplinkConfig.model_validate(
        {
            "connect_timeout_s": 0.2,
            "open_s": 0.5,
            "failure_threshold": 2,
            "queue": 16,
            "streams": 1,
            "spool_path": str(tmp_path / "spool.sqlite"),
            **over,
        }
    )
    up = Uplink(f"127.0.0.1:{port}", cfg, metrics)
    up.start()
    return up, metrics


def test_an_outage_loses_no_crop_and_the_spool_drains_in_order(port: int, tmp_path: Path) -> None:
    up, m = make(port, tmp_path)
    cloud = Cloud()
    server = None
    offered = 0
    try:
        # 4 s of outage at 100 crops/s: far more than the 16-crop memory buffer holds.
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0:
            up.offer(crops(4, start=offered))
            offered += 4
            time.sleep(0.04)
        assert up.breaker.state is not BreakerState.CLOSED
        assert up.spooled > 300
        assert sample(m.registry, "strata_edge_uplink_spool_crops") == up.spooled
        server = serve(cloud, port)  # the cloud returns
        # Crops keep coming while the spool drains.
        for _ in range(10):
            up.offer(crops(4, start=offered))
            offered += 4
            time.sleep(0.02)
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == offered, 40.0)
        assert wait_for(lambda: up.buffered == 0)
    finally:
        up.stop()
        if server is not None:
            server.stop(0)
    first_seen: list[str] = []
    seen: set[str] = set()
    for c in cloud.crops:
        if c.crop_id not in seen:
            seen.add(c.crop_id)
            first_seen.append(c.crop_id)
    assert first_seen == sorted(first_seen)  # oldest first, across memory and disk
    assert sample(m.registry, "strata_edge_drops_total", {"reason": "uplink_spool_full"}) == 0
    assert sample(m.registry, "strata_edge_drops_total", {"reason": "crop_buffer_full"}) == 0
    assert sample(m.registry, "strata_edge_breaker_trips_total") == 1


def test_beyond_the_spool_bound_drops_are_counted(port: int, tmp_path: Path) -> None:
    one = len(crops(1)[0].SerializeToString())
    up, m = make(port, tmp_path, spool_max_mib=50 * one / 2**20)
    cloud = Cloud()
    server = None
    try:
        up.offer(crops(100))  # 16 in memory, 50 on disk, 34 dropped (the oldest on disk)
        dropped = sample(m.registry, "strata_edge_drops_total", {"reason": "uplink_spool_full"})
        assert dropped == 34
        server = serve(cloud, port)
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == 66, 30.0)
        stored = {c.crop_id for c in cloud.crops}
        assert len(stored) + dropped == 100  # every crop stored or counted
    finally:
        up.stop()
        if server is not None:
            server.stop(0)


def test_crops_unsent_at_stop_are_sent_after_a_restart(port: int, tmp_path: Path) -> None:
    up, _ = make(port, tmp_path)
    up.offer(crops(40))
    assert wait_for(lambda: up.breaker.state is BreakerState.OPEN)
    up.stop()  # memory and in-flight crops go to the spool file
    cloud = Cloud()
    server = serve(cloud, port)
    up2, _ = make(port, tmp_path)
    try:
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == 40, 30.0)
    finally:
        up2.stop()
        server.stop(0)


def test_streams_spread_over_every_endpoint(tmp_path: Path) -> None:
    from strata.shared.loopback import free_port

    ports = [free_port(), free_port()]
    clouds = [Cloud(), Cloud()]
    servers = [serve(c, p) for c, p in zip(clouds, ports, strict=True)]
    metrics = EdgeMetrics()
    cfg = UplinkConfig.model_validate(
        {
            "streams": 2,
            "batch": 4,
            "stream_max_age_s": 0.3,  # renewed streams go round the endpoints
            "spool_path": str(tmp_path / "s.sqlite"),
        }
    )
    up = Uplink([f"127.0.0.1:{p}" for p in ports], cfg, metrics)
    up.start()
    try:
        for i in range(20):
            up.offer(crops(4, start=4 * i))
            time.sleep(0.05)
        assert wait_for(lambda: sum(len({c.crop_id for c in k.crops}) for k in clouds) == 80)
        assert all(k.crops for k in clouds), [len(k.crops) for k in clouds]
        # One endpoint goes away: the other takes everything that follows.
        servers[0].stop(0)
        before = len(clouds[1].crops)
        for i in range(20, 30):
            up.offer(crops(4, start=4 * i))
            time.sleep(0.02)
        assert wait_for(
            lambda: {c.crop_id for k in clouds for c in k.crops} >= set(ids(crops(40, start=80))),
            30.0,
        )
        assert len(clouds[1].crops) > before
    finally:
        up.stop()
        for s in servers:
            s.stop(0)


def test_a_failed_edges_spool_is_taken_over_in_order_and_a_live_one_is_left(
    port: int, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry, Counter

    dead = tmp_path / "dead" / "spool.sqlite"
    left = CropSpool(str(dead), 10 << 20)
    left.push(crops(40))
    left.close()  # what a kill -9 leaves: the rows, no lock holder
    up, m = make(port, tmp_path)
    reg = CollectorRegistry()
    adopted = Counter("adopted", "crops", registry=reg)
    cloud = Cloud()
    server = serve(cloud, port)
    try:
        up.offer(crops(5, start=100))  # its own, before
        t = up.adopt_spool(str(dead), "edge-a", adopted)
        assert t is not None
        t.join(10)
        assert sample(reg, "adopted_total") == 40
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == 45, 30.0)
        # A live peer's spool is locked: it stays where it is.
        live = CropSpool(str(tmp_path / "live.sqlite"), 10 << 20)
        live.push(crops(3, start=200))
        t = up.adopt_spool(str(tmp_path / "live.sqlite"), "edge-c", adopted)
        assert t is not None
        t.join(10)
        assert len(live) == 3 and sample(reg, "adopted_total") == 40
        live.close()
    finally:
        up.stop()
        server.stop(0)
    again = CropSpool(str(dead), 10 << 20)
    assert len(again) == 0
    again.close()
    theirs = [c.crop_id for c in cloud.crops if c.crop_id < "c000100"]
    assert theirs[:40] == sorted(theirs[:40])  # the dead edge's crops in their order
    assert sample(m.registry, "strata_edge_drops_total") == 0
