"""Routing over several edges with the real daemons: failover, a joining edge, SIGHUP.

Real `strata edge` processes (the colour detector) and a real `strata device` process
with synthetic paced cameras (motion, gate, cascade and source degradation off, so every
decoded frame is sent and sequences are consecutive). One SUB socket on every edge's PUB
records each result: a missing sequence between a camera's first and last published one
is a lost frame, and at the end every frame the agent sent must have been published.
"""

from __future__ import annotations

import collections
import itertools
import math
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from edge_testkit import MODEL_SIZE
from strata.tools.fleet import DeviceProc, EdgeProc, Results, gaps, synthetic_source, wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def fleet(colour_model: Path, tmp_path: Path) -> Iterator[list[EdgeProc]]:
    edges = [EdgeProc(f"e{i}", tmp_path, str(colour_model), MODEL_SIZE) for i in range(4)]
    yield edges
    for e in edges:
        e.stop()


def _device_log(dev: DeviceProc) -> str:
    return dev.log.read_text() if dev.log.exists() else ""


def _no_loss(dev: DeviceProc, res: Results, cams: list[str]) -> None:
    seqs = res.sequences()
    for cam in cams:
        sent = dev.metric("strata_device_frames_sent_total", camera=cam)
        got = seqs.get(cam, set())
        assert sent > 0, cam
        assert not gaps(got), f"{cam}: lost sequences {gaps(got)[:10]}"
        assert len(got) == sent, f"{cam}: sent {sent}, published {len(got)}"
    assert dev.metric("strata_device_frames_dropped_total") == 0, _device_log(dev)[-3000:]


def test_kill_9_of_an_edge_moves_its_cameras_and_loses_no_frame(
    fleet: list[EdgeProc], tmp_path: Path
) -> None:
    edges = fleet[:3]
    for e in edges:
        e.start()
    res = Results([e.publish for e in edges])
    cams = {f"cam{i}": synthetic_source(i, 4, 110) for i in range(6)}
    dev = DeviceProc(tmp_path, [e.listen for e in edges], cams)
    try:
        dev.start()
        assert wait_until(lambda: len(res.placement(0)) == len(cams), 30), _device_log(dev)
        time.sleep(1.0)
        now = time.monotonic()
        placement = res.placement(now - 1.0)
        per: dict[str, list[str]] = {}
        for cam, edge in placement.items():
            per.setdefault(edge, []).append(cam)
        name = max(per, key=lambda k: len(per[k]))
        victim = next(e for e in edges if e.name == name)
        moved = per[name]
        killed_at = time.monotonic()  # before: reaping a killed process takes a while
        victim.kill()

        def served_elsewhere() -> bool:
            after = [r for r in res.snapshot() if r.at > killed_at and r.edge != name]
            return set(moved) <= {r.camera for r in after}

        assert wait_until(served_elsewhere, 20), _device_log(dev)[-3000:]
        first = {}
        for r in res.snapshot():
            if r.at > killed_at and r.edge != name and r.camera in moved:
                first.setdefault(r.camera, r.at - killed_at)
        # The target is 5 s (2 s edge timeout + the resend); margin for a shared machine.
        assert max(first.values()) < 10.0, first
        assert dev.wait(60) == 0
        time.sleep(0.5)
        _no_loss(dev, res, list(cams))
        assert "leaves the ring" in _device_log(dev)
    finally:
        if dev.proc is not None and dev.proc.poll() is None:
            dev.stop()
        res.close()


@pytest.mark.timeout(240)  # 32 paced cameras over four edges on a shared machine
def test_a_fourth_edge_joins_progressively_within_its_warm_up_share(
    fleet: list[EdgeProc], tmp_path: Path
) -> None:
    for e in fleet[:3]:
        e.start()
    res = Results([e.publish for e in fleet])
    # 32 cameras: enough that where the random ports hash on the ring cannot leave the
    # newcomer without the cameras that prefer it (a quarter is 8).
    n = 32
    cams = {f"c{i}": synthetic_source(i, 2, 100000) for i in range(n)}
    warmup_s, ramp_s = 8.0, 4.0
    routing = {"warmup_s": warmup_s, "ramp_s": ramp_s, "moves_per_s": 1.0}
    # One worker process: each worker runs its own ring over its own cameras, so the
    # load factor's bound (ceil(1.15 x 32 / 3) = 13 an edge) holds per worker; the two
    # workers `auto` starts for 32 cameras on two cores may put 7 + 7 = 14 on one edge.
    dev = DeviceProc(tmp_path, [e.listen for e in fleet], cams, routing, loop=True, processes=1)
    newcomer = fleet[3]
    try:
        dev.start()
        assert wait_until(lambda: len(res.placement(0)) == n, 30), _device_log(dev)

        def settled() -> bool:
            # The founding edges come up one after another: wait until the three share the
            # cameras within their bounds and the placement holds for a second, so the moves
            # counted below are the newcomer's, not the start-up's.
            first = res.placement(time.monotonic() - 1.2)
            time.sleep(1.0)
            again = res.placement(time.monotonic() - 1.2)
            per_edge = collections.Counter(again.values())
            return (
                first == again
                and len(again) == n
                and len(per_edge) == 3
                and max(per_edge.values()) <= math.ceil(1.15 * n / 3)
            )

        # Up to 90 s: the three founding edges' warm-ups and the progressive moves (1/s)
        # after them took over 45 s for 32 cameras in a CI run; the figures asserted below
        # are counted after this point.
        assert wait_until(settled, 90), res.placement(time.monotonic() - 1.2)
        before = res.placement(time.monotonic() - 1.2)
        assert newcomer.name not in before.values()
        newcomer.start()
        assert wait_until(lambda: f"{newcomer.listen} is up" in _device_log(dev), 60)
        up_at = time.monotonic()
        counts: list[tuple[float, int]] = []
        while time.monotonic() - up_at < warmup_s + ramp_s + 6.0:
            time.sleep(0.5)
            now = time.monotonic()
            on_new = [c for c, e in res.placement(now - 1.2).items() if e == newcomer.name]
            counts.append((now - up_at, len(on_new)))
        after = res.placement(time.monotonic() - 1.2)
        # Warm-up: at most half a fair share (floor(0.5 x 32 / 4) = 4, the ring's cap of a
        # warming edge), with a second's margin for the results window at its end.
        warm = [k for t, k in counts if t < warmup_s - 1.0]
        assert max(warm, default=0) <= n // 8, counts
        # Progressive: the count grows a little at a time, never all at once.
        steps = [b[1] - a[1] for a, b in itertools.pairwise(counts)]
        assert max(steps) <= 2, counts
        # Settled (2 s after the ramp, for the last moves at 1/s and the results window):
        # the newcomer holds at least half its fair share at every count, not just once.
        # The 60-camera routing benchmark measures the share itself (1/4 + 5%).
        settled_counts = [k for t, k in counts if t >= warmup_s + ramp_s + 2.0]
        assert len(settled_counts) >= 4, counts
        assert min(settled_counts) >= math.ceil(0.5 * n / 4), counts
        # A quarter moves to the newcomer, and the bounds (ceil(1.15 x 8) = 10 per edge)
        # make the old edges shed a few more: at most 7 in 16, as with 16 cameras.
        assert len(after) == n, after
        moved = sum(1 for c in before if after[c] != before[c])
        assert moved <= math.ceil(7 * n / 16), (before, after)
        assert dev.stop() == 0
        time.sleep(0.5)
        _no_loss(dev, res, list(cams))
    finally:
        if dev.proc is not None and dev.proc.poll() is None:
            dev.stop()
        res.close()


def test_sighup_adds_and_removes_cameras_and_a_removed_one_drains(
    fleet: list[EdgeProc], tmp_path: Path
) -> None:
    edges = fleet[:2]
    for e in edges:
        e.start()
    res = Results([e.publish for e in edges])
    cams = {name: synthetic_source(i, 4, 100000) for i, name in enumerate(["a", "b", "c"])}
    dev = DeviceProc(tmp_path, [e.listen for e in edges], cams, loop=True)
    try:
        dev.start()
        assert wait_until(lambda: len(res.placement(0)) == 3, 30), _device_log(dev)
        time.sleep(1.0)
        dev.write_cameras({"b": cams["b"], "c": cams["c"], "d": synthetic_source(7, 4, 100000)})
        dev.hup()
        hup_at = time.monotonic()
        assert wait_until(lambda: "d" in res.placement(hup_at), 20), _device_log(dev)
        assert wait_until(lambda: "camera a removed" in _device_log(dev), 20)
        assert "every frame it sent was settled" in _device_log(dev)
        time.sleep(1.5)
        quiet = time.monotonic()
        time.sleep(1.5)
        assert "a" not in res.placement(quiet)
        assert {"b", "c", "d"} <= set(res.placement(quiet))
        # A bad file changes nothing.
        dev.cfg.write_text("device:\n  cameras: [{}]\n")
        dev.hup()
        assert wait_until(lambda: "reload refused" in _device_log(dev), 10)
        assert dev.proc is not None and dev.proc.poll() is None
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.wait(40) == 0
        time.sleep(0.5)
        _no_loss(dev, res, ["a", "b", "c", "d"])
    finally:
        if dev.proc is not None and dev.proc.poll() is None:
            dev.stop()
        res.close()
