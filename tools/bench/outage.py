"""A cloud outage against the edge's uplink, accelerated: how many crops it loses (target 0).

Offers crops the size of the demo's (cut from vtest at the edge's JPEG quality) at the demo's
crop rate times `--speedup` while no cloud listens, for `--outage-s / --speedup` seconds, so
the uplink holds `--outage-s` of the demo's crops. Then a cloud comes up (a gRPC servicer in
this process that acks every crop STORED and records it: the edge side is what is measured;
the real cloud's throughput is `strata bench cloud`), and the run waits until every
crop is acked. Reports offered, stored, dropped by reason, the spool's peak, how many minutes
the configured spool holds at the demo's rate, the drain time and the order crops arrived in.

    strata bench outage --json outage.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import (
    analytics_pb2,
    analytics_pb2_grpc,
    common_pb2,
    current_version,
)
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_model
from strata.shared.metrics import sample


class _AckingCloud(analytics_pb2_grpc.AnalyticsServicer):  # type: ignore[misc]
    """Acks every crop STORED; remembers the order crop ids first arrived in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[str] = []
        self.seen: set[str] = set()

    def Uplink(  # noqa: N802
        self, request_iterator: Iterator[analytics_pb2.CropBatch], context: Any
    ) -> Iterator[analytics_pb2.UplinkResponse]:
        for batch in request_iterator:
            with self.lock:
                for c in batch.crops:
                    if c.crop_id not in self.seen:
                        self.seen.add(c.crop_id)
                        self.order.append(c.crop_id)
            yield analytics_pb2.UplinkResponse(
                version=current_version(),
                acks=[
                    analytics_pb2.CropAck(
                        crop_id=c.crop_id, status=analytics_pb2.CROP_STATUS_STORED
                    )
                    for c in batch.crops
                ],
            )


def _crop_images(clip: str, n: int, width: int, height: int, quality: int) -> list[bytes]:
    """`n` JPEG crops of width x height from the clip's frames (noise when it is missing)."""
    import cv2

    rng = np.random.default_rng(3)
    frames: list[np.ndarray] = []
    cap = cv2.VideoCapture(clip) if clip and Path(clip).exists() else None
    while cap is not None and len(frames) < 50:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    if cap is not None:
        cap.release()
    if not frames:
        frames = [rng.integers(0, 256, (576, 768, 3), np.uint8)]
    out: list[bytes] = []
    for i in range(n):
        f = frames[i % len(frames)]
        y = int(rng.integers(0, f.shape[0] - height))
        x = int(rng.integers(0, f.shape[1] - width))
        ok, buf = cv2.imencode(
            ".jpg", f[y : y + height, x : x + width], [cv2.IMWRITE_JPEG_QUALITY, quality]
        )
        if not ok:
            raise RuntimeError("cannot encode a crop")
        out.append(bytes(buf))
    return out


def measure(args: argparse.Namespace) -> dict[str, object]:
    """The outage, the recovery, the counts."""
    images = _crop_images(args.clip, 64, args.crop_width, args.crop_height, args.jpeg_quality)
    tmp = Path(tempfile.mkdtemp(prefix="strata-outage-"))
    port = free_port()
    cfg = UplinkConfig.model_validate(
        {"spool_path": str(tmp / "uplink-spool.sqlite"), "spool_max_mib": args.spool_mib}
    )
    metrics = EdgeMetrics()
    up = Uplink(f"127.0.0.1:{port}", cfg, metrics)
    up.start()
    rate = args.crops_per_frame * args.fps  # crops a second at the demo's pace
    total = int(rate * args.outage_s)
    frames = total // args.crops_per_frame
    period = 1.0 / (args.fps * args.speedup)
    load_before = os.getloadavg()
    offer_ms: list[float] = []
    crop_bytes = 0
    peak_spool = 0
    t0 = time.monotonic()
    for f in range(frames):
        crops = [
            analytics_pb2.Crop(
                crop_id=f"f{f:07d}-{k}",
                edge_id="outage-bench",
                camera_id="cam",
                sequence=f + 1,
                encoding=common_pb2.ENCODING_JPEG,
                image=images[(f * args.crops_per_frame + k) % len(images)],
            )
            for k in range(args.crops_per_frame)
        ]
        crop_bytes += sum(c.ByteSize() for c in crops)
        a = time.perf_counter()
        up.offer(crops)
        offer_ms.append((time.perf_counter() - a) * 1000)
        if f % 100 == 0:
            peak_spool = max(
                peak_spool, int(sample(metrics.registry, "strata_edge_uplink_spool_bytes"))
            )
        delay = t0 + (f + 1) * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    outage_wall = time.monotonic() - t0
    peak_spool = max(peak_spool, int(sample(metrics.registry, "strata_edge_uplink_spool_bytes")))
    spooled = up.spooled
    cloud = _AckingCloud()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    analytics_pb2_grpc.add_AnalyticsServicer_to_server(cloud, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    back = time.monotonic()
    deadline = back + args.drain_timeout_s
    while time.monotonic() < deadline:
        with cloud.lock:
            if len(cloud.seen) >= total:
                break
        time.sleep(0.1)
    drained = time.monotonic() - back
    up.stop()
    server.stop(0)
    reg = metrics.registry
    drops = {
        r: int(sample(reg, "strata_edge_drops_total", {"reason": r}))
        for r in (
            "uplink_spool_full",
            "crop_buffer_full",
            "uplink_spool_error",
            "uplink_spool_corrupt",
        )
    }
    order = cloud.order
    index = {cid: i for i, cid in enumerate(sorted(order))}
    displacement = max((abs(index[c] - i) for i, c in enumerate(order)), default=0)
    per_crop = crop_bytes / max(total, 1)
    spool_bytes = args.spool_mib * 1024 * 1024
    offered_ms = np.asarray(offer_ms)
    return {
        "benchmark": "edge uplink through a cloud outage (accelerated), disk spool",
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "settings": {
            "demo_rate_crops_per_s": rate,
            "outage_s_at_demo_rate": args.outage_s,
            "speedup": args.speedup,
            "crop": f"{args.crop_width}x{args.crop_height} JPEG q{args.jpeg_quality}",
            "memory_queue": cfg.queue,
            "spool_max_mib": args.spool_mib,
        },
        "offered": total,
        "stored": len(cloud.seen),
        "lost": total - len(cloud.seen) - sum(drops.values()),
        "dropped": drops,
        "outage_wall_s": round(outage_wall, 1),
        "spooled_at_recovery": spooled,
        "spool_peak_mib": round(peak_spool / 2**20, 1),
        "bytes_per_crop": round(per_crop),
        "spool_holds_minutes_at_demo_rate": round(spool_bytes / (per_crop * rate) / 60, 1),
        "drain_s": round(drained, 1),
        "drain_crops_per_s": round(total / drained, 1) if drained else 0.0,
        "max_order_displacement": displacement,
        "offer_p99_ms": round(float(np.percentile(offered_ms, 99)), 2),
        "offer_max_ms": round(float(offered_ms.max()), 2),
        "rss_max_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench outage`'s options."""
    p.add_argument("--outage-s", type=float, default=600.0, help="outage, at the demo's pace")
    p.add_argument("--speedup", type=float, default=20.0, help="offer this much faster")
    p.add_argument("--fps", type=float, default=10.0, help="camera frame rate of the demo")
    p.add_argument(
        "--crops-per-frame", type=int, default=4, help="crops a frame (edge.crops.max_per_frame)"
    )
    p.add_argument("--crop-width", type=int, default=64)
    p.add_argument("--crop-height", type=int, default=160)
    p.add_argument("--jpeg-quality", type=int, default=85, help="edge.crops.jpeg_quality")
    p.add_argument("--clip", default="data/vtest.avi", help="frames the crops are cut from")
    p.add_argument("--spool-mib", type=float, default=512.0, help="edge.uplink.spool_max_mib")
    p.add_argument("--drain-timeout-s", type=float, default=600.0)
    p.add_argument("--json", metavar="OUT", help="write the results here")


def run(args: argparse.Namespace) -> int:
    """The figures on stdout (and in --json); 1 when a crop was lost."""
    result = measure(args)
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0 if result["lost"] == 0 else 1
