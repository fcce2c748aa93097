"""Routing benchmark: real edge processes on loopback, one agent with many cameras.

    strata bench routing [--cameras 60] [--fps 1] [--warmup 20] [--ramp 10]

1. 3 edges (equal weights) and N paced synthetic cameras: cameras per edge, max/mean.
2. A 4th edge starts: how many cameras it holds during its warm-up (against a fair share of
   N/4), how they arrive (per second), and how many cameras moved in all once settled.
3. kill -9 of the busiest edge under load: for each of its cameras, the time from the kill
   to its first result from another edge.
4. The agent is stopped (it drains): every frame it sent must have been published once at
   least, with no sequence missing (an acknowledged frame lost would be one).

Placement is read from the results themselves (which edge published each camera's latest
frame), never from the agent's own view. Gates are off and frames are small, so the load is
routing and delivery, not inference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from datetime import datetime
from pathlib import Path

from strata.tools.fleet import DeviceProc, EdgeProc, Results, gaps, synthetic_source, wait_until


def _per_edge(placement: dict[str, str], names: list[str]) -> dict[str, int]:
    out = dict.fromkeys(names, 0)
    for edge in placement.values():
        out[edge] = out.get(edge, 0) + 1
    return out


def measure(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    edges = [EdgeProc(f"e{i}", tmp, args.model, args.input_size) for i in range(4)]
    names = [e.name for e in edges]
    window = max(2.5, 2.5 / args.fps)
    n = args.cameras
    cams = {f"cam{i:03d}": synthetic_source(i, args.fps, 10**6) for i in range(n)}
    routing = {"warmup_s": args.warmup, "ramp_s": args.ramp, "moves_per_s": args.moves_per_s}
    out: dict[str, object] = {"cameras": n, "fps_per_camera": args.fps, "routing": routing}
    for e in edges[:3]:
        e.start()
    res = Results([e.publish for e in edges])
    dev = DeviceProc(tmp, [e.listen for e in edges], cams, routing, loop=True)
    try:
        dev.start()
        if not wait_until(lambda: len(res.placement(0)) == n, 90):
            raise SystemExit(f"not every camera published within 90 s; see {tmp}")
        time.sleep(window + 1.0)
        p3 = res.placement(time.monotonic() - window)
        per3 = _per_edge(p3, names[:3])
        out["three_edges"] = {
            "per_edge": per3,
            "max_over_mean": round(max(per3.values()) / (n / 3), 3),
            "placed": len(p3),
        }
        out["loadavg_before_join"] = os.getloadavg()

        newcomer = edges[3]
        newcomer.start()
        if not wait_until(lambda: f"{newcomer.listen} is up" in dev.log.read_text(), 60):
            raise SystemExit("the 4th edge never came up")
        up_at = time.monotonic()
        timeline: list[tuple[float, int]] = []
        while time.monotonic() - up_at < args.warmup + args.ramp + args.settle:
            time.sleep(1.0)
            now = time.monotonic()
            on_new = sum(1 for e in res.placement(now - window).values() if e == newcomer.name)
            timeline.append((round(now - up_at, 1), on_new))
        p4 = res.placement(time.monotonic() - window)
        per4 = _per_edge(p4, names)
        fair = n / 4
        # The results window lags the agent by up to `window`: judge the warm-up share on
        # samples taken once that lag is inside the warm-up.
        warm = [k for t, k in timeline if t <= args.warmup]
        moved = sum(1 for c in p3 if p4.get(c) != p3[c])
        log_moves = re.findall(r"camera \S+: \S+ -> (\S+) \(rebalance\)", dev.log.read_text())
        out["fourth_edge"] = {
            "timeline_s_cameras": timeline,
            "max_during_warmup": max(warm, default=0),
            "fair_share": fair,
            "max_during_warmup_over_fair": round(max(warm, default=0) / fair, 3),
            "per_edge_after": per4,
            "max_over_mean_after": round(max(per4.values()) / fair, 3),
            "moved": moved,
            "moved_fraction": round(moved / n, 3),
            "agent_rebalance_moves": len(log_moves),
        }
        out["loadavg_before_kill"] = os.getloadavg()

        by_edge: dict[str, list[str]] = {}
        for cam, edge in p4.items():
            by_edge.setdefault(edge, []).append(cam)
        victim_name = max(by_edge, key=lambda k: len(by_edge[k]))
        victim = next(e for e in edges if e.name == victim_name)
        its = set(by_edge[victim_name])
        killed = time.monotonic()  # before: reaping a killed process takes a while
        killed_wall = time.time()
        victim.kill()

        def served() -> bool:
            later = {r.camera for r in res.snapshot() if r.at > killed and r.edge != victim_name}
            return its <= later

        wait_until(served, 60)
        first: dict[str, float] = {}
        for r in res.snapshot():
            if r.at > killed and r.edge != victim_name and r.camera in its:
                first.setdefault(r.camera, r.at - killed)
        times = sorted(first.values())
        detected = None
        for line in dev.log.read_text().splitlines():
            if f"{victim.listen}: nothing heard" in line:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                detected = round(stamp - killed_wall, 2)
        out["kill_9"] = {
            "edge": victim_name,
            "its_cameras": len(its),
            "served_elsewhere": len(first),
            "max_s": round(times[-1], 2) if times else None,
            "p50_s": round(times[len(times) // 2], 2) if times else None,
            "within_5s": sum(1 for t in times if t <= 5.0),
            "agent_saw_it_gone_after_s": detected,
        }
        time.sleep(2.0)
    finally:
        if dev.proc is not None:
            rc = dev.stop(120)
        time.sleep(1.0)
        for e in edges:
            e.stop()
        res.close()
    seqs = res.sequences()
    sent = dev.metric("strata_device_frames_sent_total")
    published = sum(len(s) for s in seqs.values())
    missing = sum(len(gaps(s)) for s in seqs.values())
    redeliveries = sum(1 for r in res.snapshot() if r.redelivery)
    out["delivery"] = {
        "agent_exit": rc,
        "frames_sent": sent,
        "frames_processed_acked": dev.metric("strata_device_frames_processed_total"),
        "distinct_frames_published": published,
        "sequences_missing": missing,
        "dropped_by_agent": dev.metric("strata_device_frames_dropped_total"),
        "redelivered_results": redeliveries,
    }
    out["loadavg_end"] = os.getloadavg()
    out["workdir"] = str(tmp)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench routing`'s options."""
    p.add_argument("--cameras", type=int, default=60)
    p.add_argument("--fps", type=int, default=1, help="frames per second per camera")
    p.add_argument("--warmup", type=float, default=20.0, help="routing.warmup_s")
    p.add_argument("--ramp", type=float, default=10.0, help="routing.ramp_s")
    p.add_argument("--moves-per-s", type=float, default=2.0, help="routing.moves_per_s")
    p.add_argument("--settle", type=float, default=15.0, help="seconds after the ramp")
    p.add_argument("--model", default="", help="detector ONNX (default: starter yolov8n)")
    p.add_argument("--input-size", type=int, default=160)
    p.add_argument("--json", metavar="FILE", help="write the figures here too")


def run(args: argparse.Namespace) -> int:
    """The four steps; the figures as JSON on stdout."""
    out = measure(args)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0
