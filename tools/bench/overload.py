"""Overload against a real edge daemon: `strata bench overload`.

Starts `strata edge` (starter yolov8n, or --model) as its own process, subscribes to its
results, and offers frames from several device senders (the real strata.device Sender and
SourceDegrader, one DEALER per camera, over loopback):
  1. capacity: closed loop (each camera keeps its credit window full) for --seconds;
  2. then 1x, 2x, 3x that capacity, open loop (frames offered at a fixed rate whatever the
     edge says), for --seconds each, on fresh cameras, each phase drained at its end.
Per phase it reports goodput (results per second within the window), the p50/p99 of
admitted frames (last send to result on the SUB socket), capture to result, the frames
each camera got against its fair share, the edge's RSS at the start and end, and the
reconciliation offered = processed + dropped at the device (by reason, edge's REJECTED and
SHED included) + still pending, with what is unaccounted (should be 0). From the edge's
/metrics over each window it also reports where the node's time went: worker busy share,
batches and their mean size, inference time per batch, BUSY answers, queue depth, the
credits granted against the frames held, the batch limit, and the CPU both processes used
(so open-loop senders stealing the node's cores would show).

Lives in tools/ because it drives both tiers (a tier never imports another).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry
from strata.device.metrics import CameraCounts, DeviceMetrics, dropped_by_reason
from strata.device.transport.sender import Sender
from strata.shared.config.device import DegradeConfig, SenderConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_line
from strata.tools.subscriber import ResultSubscriber

MB = 1 << 20
ResultKey = tuple[int, str, int]  # (session, camera, sequence)
Arrival = tuple[float, float, float]  # (monotonic arrival, admitted s, capture-to-result s)
# The motion threshold the synthetic frames are scored against: every offered frame passes
# it (scores are drawn in [1, 4) x this), so only degradation drops at the motion gate.
BASE_THRESHOLD = 10.0


@dataclass
class CameraFigures:
    """One camera's counts in a phase."""

    camera_id: str
    offered: int = 0
    processed: int = 0
    duplicate: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    busy_answers: int = 0
    results_in_window: int = 0

    @property
    def unaccounted(self) -> int:
        return (
            self.offered
            - self.processed
            - self.duplicate
            - sum(self.dropped.values())
            - self.pending
        )


@dataclass
class PhaseFigures:
    """One phase: load, goodput, latency, memory and the reconciliation."""

    name: str
    offered_fps: float
    seconds: float
    goodput_fps: float
    admitted_p50_ms: float
    admitted_p99_ms: float
    capture_p99_ms: float
    rss_start_mb: float
    rss_end_mb: float
    offered: int
    processed: int
    dropped: dict[str, int]
    pending: int
    unaccounted: int
    published_twice: int
    fair_share_min: float
    cameras: list[CameraFigures]
    loadavg: tuple[float, float, float]
    node: NodeFigures


class ResultCounter(ResultSubscriber):
    """Arrival time and latency of each (session, camera, sequence) the edge publishes."""

    def __init__(self, address: str) -> None:
        # key -> (arrival monotonic, admitted latency s, capture-to-result s)
        self.first: dict[ResultKey, Arrival] = {}
        self.repeats = 0
        self.redeliveries = 0
        super().__init__([address])

    def on_result(self, msg: frame_pb2.FrameDetections, received_ns: int) -> None:
        key = (msg.session_id, msg.camera_id, msg.sequence)
        if key in self.first:
            self.repeats += 1
        else:
            t = msg.timing
            self.first[key] = (
                time.monotonic(),
                (received_ns - t.device_send_ns) / 1e9,
                (received_ns - t.capture_ns) / 1e9,
            )
        self.redeliveries += msg.redelivery

    def of(
        self, cameras: set[str]
    ) -> list[tuple[tuple[int, str, int], tuple[float, float, float]]]:
        """Results of these cameras."""
        with self.lock:
            return [(k, v) for k, v in self.first.items() if k[1] in cameras]


class Producer:
    """One camera: frames offered at `rate` per second (open loop), or as fast as the
    camera's window takes them (closed loop, rate None), through the source degradation."""

    def __init__(
        self,
        camera_id: str,
        sender: Sender,
        frames: Sequence[tuple[bytes, int, int]],
        rate: float | None,
        seed: int,
    ) -> None:
        self.camera_id = camera_id
        self.sender = sender
        self.frames = frames
        self.rate = rate
        self.offered = 0
        self.m = sender.metrics.camera(camera_id)
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"offer-{camera_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _offer_one(self) -> None:
        deg = self.sender.degrader(self.camera_id)
        i = self.offered
        self.offered += 1
        score = BASE_THRESHOLD * self._rng.uniform(1.0, 4.0)
        if score < deg.motion_threshold(BASE_THRESHOLD):
            self.m.dropped("degraded_motion").inc()
            return
        if not deg.keep_by_rate():
            self.m.dropped("degraded_rate").inc()
            return
        payload, w, h = self.frames[i % len(self.frames)]
        header = frame_pb2.FrameHeader(
            agent_id="overload",
            camera_id=self.camera_id,
            capture_ns=time.time_ns(),
            width=w,
            height=h,
            encoding=common_pb2.ENCODING_JPEG,
            motion_score=score,
            frame_index=i,
        )
        self.sender.submit(self.camera_id, header, payload)

    def _run(self) -> None:
        if self.rate is None:
            box = self.sender.outbox(self.camera_id)
            while not self._stop.is_set():
                if box.pending < 2 * box.window:
                    self._offer_one()
                else:
                    time.sleep(0.002)
            return
        period = 1.0 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            while due <= now and not self._stop.is_set():
                self._offer_one()
                due += period
            self._stop.wait(max(0.0, due - time.monotonic()))


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / MB
    return 0.0


def bench_frames(width: int, height: int, count: int) -> list[tuple[bytes, int, int]]:
    """JPEG frames of the synthetic clip, encoded once (the senders only send)."""
    import cv2
    from strata.shared.synthetic import SyntheticClip

    clip = SyntheticClip(width=width, height=height, frames=max(count, 20), objects=4, seed=3)
    out = []
    for i in range(count):
        ok, buf = cv2.imencode(".jpg", clip.frame(i).image, [cv2.IMWRITE_JPEG_QUALITY, 80])
        if not ok:
            raise RuntimeError("cv2 cannot encode JPEG")
        out.append((buf.tobytes(), width, height))
    return out


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3 if values else 0.0


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# What the probe reads from the edge's /metrics (name -> label filter).
_PROBED = {
    "idle": ("strata_edge_worker_idle_seconds_total", {}),
    "batch_sum": ("strata_edge_batch_size_sum", {}),
    "batches": ("strata_edge_batch_size_count", {}),
    "infer_sum": ("strata_edge_inference_seconds_sum", {}),
    "busy": ("strata_edge_frames_total", {"status": "busy"}),
    "depth": ("strata_edge_queue_depth", {}),
    "capacity": ("strata_edge_capacity_fps", {}),
    "pressure": ("strata_edge_pressure", {}),
    "credits": ("strata_edge_credits", {}),
    "held": ("strata_edge_frames_held", {}),
    "limit": ("strata_edge_batch_limit", {}),
    "gpu_level": ("strata_edge_degradation_level", {}),
}


@dataclass
class NodeSample:
    """The edge's counters and gauges at one moment, with both processes' CPU time."""

    t: float
    values: dict[str, float]
    edge_cpu_s: float
    bench_cpu_s: float


@dataclass
class NodeFigures:
    """What the node did over a phase: where its time went, and who used the CPU."""

    utilization: float  # 1 - worker idle / wall time
    batches: int
    mean_batch: float
    inference_ms_per_batch: float
    busy_answers: int
    edge_cpu_cores: float
    bench_cpu_cores: float
    depth_mean: float
    depth_max: float
    capacity_fps_end: float
    pressure_mean: float
    credits_mean: float
    held_mean: float
    batch_limit_mean: float
    degradation_level_max: float


class NodeProbe:
    """Reads the edge's /metrics every `period_s` in its own thread (queue depth over time)
    and on demand (phase start and end)."""

    def __init__(self, port: int, pid: int, period_s: float = 0.25) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.pid = pid
        self.period_s = period_s
        self.series: list[NodeSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._thread.start()

    def read(self) -> NodeSample:
        """One sample now."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url, timeout=5) as r:
            text = r.read().decode()
        values = dict.fromkeys(_PROBED, 0.0)
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                for key, (name, labels) in _PROBED.items():
                    if smp.name == name and all(smp.labels.get(k) == v for k, v in labels.items()):
                        values[key] = float(smp.value)
        return NodeSample(time.monotonic(), values, _cpu_s(self.pid), _cpu_s(os.getpid()))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                smp = self.read()
            except OSError:
                continue
            with self._lock:
                self.series.append(smp)

    def between(self, a: NodeSample, b: NodeSample) -> NodeFigures:
        """The node's figures from sample a to sample b."""
        dt = max(1e-9, b.t - a.t)
        d = {k: b.values[k] - a.values[k] for k in _PROBED}
        batches = int(d["batches"])
        with self._lock:
            mid = [s for s in self.series if a.t <= s.t <= b.t]
        depths = [s.values["depth"] for s in mid] or [0.0]
        pressures = [s.values["pressure"] for s in mid] or [0.0]

        def mean(key: str) -> float:
            return float(np.mean([s.values[key] for s in mid])) if mid else 0.0

        return NodeFigures(
            utilization=1.0 - d["idle"] / dt,
            batches=batches,
            mean_batch=d["batch_sum"] / batches if batches else 0.0,
            inference_ms_per_batch=1e3 * d["infer_sum"] / batches if batches else 0.0,
            busy_answers=int(d["busy"]),
            edge_cpu_cores=(b.edge_cpu_s - a.edge_cpu_s) / dt,
            bench_cpu_cores=(b.bench_cpu_s - a.bench_cpu_s) / dt,
            depth_mean=float(np.mean(depths)),
            depth_max=float(np.max(depths)),
            capacity_fps_end=b.values["capacity"],
            pressure_mean=float(np.mean(pressures)),
            credits_mean=mean("credits"),
            held_mean=mean("held"),
            batch_limit_mean=mean("limit"),
            degradation_level_max=max([s.values["gpu_level"] for s in mid] or [0.0]),
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


class Bench:
    """The edge daemon, the result counter, and the phases."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.listen = f"tcp://127.0.0.1:{free_port()}"
        self.publish = f"tcp://127.0.0.1:{free_port()}"
        metrics_port = free_port()
        model = f"    path: {args.model}\n" if args.model else ""
        cfg = tmp / "edge.yaml"
        cfg.write_text(
            "logging:\n  level: ERROR\n"
            f"edge:\n  listen: {self.listen}\n  publish: {self.publish}\n"
            f"  metrics:\n    port: {metrics_port}\n"
            f"  model:\n{model}    input_size: {args.input_size}\n"
            f"  batching:\n    max_batch: {args.max_batch}\n"
            f"    delay_target_ms: {args.delay_target_ms}\n"
        )
        cmd = [sys.executable, "-m", "strata.tools.cli", "edge", "--config", str(cfg)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        self.results = ResultCounter(self.publish)
        self.probe = NodeProbe(metrics_port, self.proc.pid)
        self.frames = bench_frames(args.width, args.height, 16)

    def close(self) -> None:
        self.results.close()
        self.probe.close()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def _senders(self, names: list[str], degrade: bool = True) -> list[Sender]:
        out = []
        for name in names:
            s = Sender(
                self.listen,
                SenderConfig(window=self.args.window, ack_timeout_s=3.0),
                DeviceMetrics(CollectorRegistry()),
                degrade=DegradeConfig(enabled=degrade, drop_policy=self.args.drop_policy),
            )
            s.add_camera(name)
            s.start()
            out.append(s)
        return out

    def warm_up(self, timeout_s: float = 120.0, full_s: float = 3.0) -> None:
        """Until the daemon answers and its results reach the SUB socket, then `full_s`
        of full batches."""
        (sender,) = self._senders(["warm"])
        prod = Producer("warm", sender, self.frames, 5.0, 0)
        prod.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.results.of({"warm"})) < 10:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the edge daemon exited with {self.proc.returncode}")
            time.sleep(0.2)
        prod.stop()
        sender.stop(5.0)
        if len(self.results.of({"warm"})) < 10:
            raise RuntimeError("the edge daemon never published results")
        # Then full batches for a while (closed loop from every camera), so what the node
        # allocates once (the runtime's arena at the largest batch, decoder pools) is in
        # the RSS baseline, not in the growth under load.
        names = [f"warm-{i}" for i in range(self.args.cameras)]
        senders = self._senders(names, degrade=False)
        prods = [
            Producer(n, s, self.frames, None, i)
            for i, (n, s) in enumerate(zip(names, senders, strict=True))
        ]
        for p in prods:
            p.start()
        time.sleep(full_s)
        for p in prods:
            p.stop()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(s.pending() for s in senders):
            time.sleep(0.1)
        for s in senders:
            s.stop(0.0)
        time.sleep(2.5)  # the warm-up cameras stop counting as active

    def phase(self, name: str, total_fps: float | None) -> PhaseFigures:
        """Offer from --cameras senders for --seconds, drain, and count."""
        a = self.args
        names = [f"{name}-{i}" for i in range(a.cameras)]
        # Closed loop offers only what the window takes: nothing to degrade.
        senders = self._senders(names, degrade=total_fps is not None)
        rate = None if total_fps is None else total_fps / a.cameras
        prods = [
            Producer(n, s, self.frames, rate, i)
            for i, (n, s) in enumerate(zip(names, senders, strict=True))
        ]
        rss_start = _rss(self.proc.pid)
        t0 = time.monotonic()
        for p in prods:
            p.start()
        # The node's own figures over the middle of the window (start-up excluded).
        time.sleep(min(2.0, a.seconds / 4))
        s0 = self.probe.read()
        time.sleep(max(0.0, t0 + a.seconds - time.monotonic()))
        s1 = self.probe.read()
        for p in prods:
            p.stop()
        t1 = time.monotonic()
        rss_end = _rss(self.proc.pid)
        deadline = time.monotonic() + a.drain_s
        while time.monotonic() < deadline and any(s.pending() for s in senders):
            time.sleep(0.1)
        time.sleep(0.3)  # the last results on their way to the SUB socket
        for s in senders:
            s.stop(0.0)
        got = self.results.of(set(names))
        in_window = [v for _, v in got if t0 <= v[0] <= t1]
        cams = []
        for n, s, p in zip(names, senders, prods, strict=True):
            counts = CameraCounts.read(s.metrics.registry, n)
            cams.append(
                CameraFigures(
                    n,
                    offered=p.offered,
                    processed=counts.processed,
                    duplicate=counts.duplicate,
                    dropped=dropped_by_reason(s.metrics.registry, n),
                    pending=s.pending(),
                    busy_answers=counts.busy,
                    results_in_window=sum(1 for k, v in got if k[1] == n and t0 <= v[0] <= t1),
                )
            )
        dropped: dict[str, int] = {}
        for c in cams:
            for r, v in c.dropped.items():
                dropped[r] = dropped.get(r, 0) + v
        seconds = t1 - t0
        total_window = sum(c.results_in_window for c in cams)
        share = total_window / len(cams) if cams else 0.0
        return PhaseFigures(
            name=name,
            offered_fps=sum(c.offered for c in cams) / seconds,
            seconds=seconds,
            goodput_fps=len(in_window) / seconds,
            admitted_p50_ms=_percentile([v[1] for _, v in got], 50),
            admitted_p99_ms=_percentile([v[1] for _, v in got], 99),
            capture_p99_ms=_percentile([v[2] for _, v in got], 99),
            rss_start_mb=rss_start,
            rss_end_mb=rss_end,
            offered=sum(c.offered for c in cams),
            processed=sum(c.processed + c.duplicate for c in cams),
            dropped=dropped,
            pending=sum(c.pending for c in cams),
            unaccounted=sum(c.unaccounted for c in cams),
            published_twice=self.results.repeats,
            fair_share_min=min(c.results_in_window for c in cams) / share if share else 0.0,
            cameras=cams,
            loadavg=os.getloadavg(),
            node=self.probe.between(s0, s1),
        )


def report(phases: list[PhaseFigures], capacity: float) -> str:
    """A markdown table of the phases."""
    rows = [
        "| load | offered/s | goodput/s | goodput / capacity | admitted p50 / p99 ms | "
        "capture p99 ms | edge RSS start -> end MB | offered = processed + dropped + pending "
        "| unaccounted | min fair share | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in phases:
        drops = sum(p.dropped.values())
        rows.append(
            f"| {p.name} | {p.offered_fps:.1f} | {p.goodput_fps:.1f} | "
            f"{p.goodput_fps / capacity:.2f} | {p.admitted_p50_ms:.0f} / {p.admitted_p99_ms:.0f} | "
            f"{p.capture_p99_ms:.0f} | {p.rss_start_mb:.0f} -> {p.rss_end_mb:.0f} | "
            f"{p.offered} = {p.processed} + {drops} + {p.pending} | {p.unaccounted} | "
            f"{p.fair_share_min:.2f} | {p.loadavg[0]:.1f} |"
        )
    rows += [
        "",
        "| load | worker busy | batches | mean batch | inference ms/batch | BUSY answers | "
        "queue depth mean / max | edge CPU cores | bench CPU cores | capacity at end | "
        "mean pressure | credits / held / batch limit (mean) | node degradation level (max) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in phases:
        n = p.node
        rows.append(
            f"| {p.name} | {n.utilization:.2f} | {n.batches} | {n.mean_batch:.2f} | "
            f"{n.inference_ms_per_batch:.0f} | {n.busy_answers} | {n.depth_mean:.1f} / "
            f"{n.depth_max:.0f} | {n.edge_cpu_cores:.2f} | {n.bench_cpu_cores:.2f} | "
            f"{n.capacity_fps_end:.1f} | {n.pressure_mean:.2f} | {n.credits_mean:.1f} / "
            f"{n.held_mean:.1f} / {n.batch_limit_mean:.1f} | {n.degradation_level_max:.0f} |"
        )
    return "\n".join(rows)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench overload`'s options."""
    p.add_argument("--model", default="", help="detector ONNX (default: starter yolov8n)")
    p.add_argument("--input-size", type=int, default=320, help="detector input side (320)")
    p.add_argument("--cameras", type=int, default=3, help="senders, one camera each (3)")
    p.add_argument("--seconds", type=float, default=20.0, help="offered time per phase (20)")
    p.add_argument("--drain-s", type=float, default=20.0, help="longest drain per phase (20)")
    p.add_argument("--loads", default="1,2,3", help="multiples of capacity offered (1,2,3)")
    p.add_argument("--max-batch", type=int, default=4, help="edge batching.max_batch (4)")
    p.add_argument("--delay-target-ms", type=float, default=200.0, help="edge delay target")
    p.add_argument("--window", type=int, default=32, help="sender window cap (32)")
    p.add_argument("--drop-policy", choices=("oldest", "newest"), default="oldest")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument(
        "--warm-s", type=float, default=3.0, help="full batches before the RSS baseline (3)"
    )
    p.add_argument("--json", default="", help="also write the figures here")


def run(args: argparse.Namespace) -> int:
    """Capacity, then each load; the tables on stdout, everything in --json."""
    tmp = Path(tempfile.mkdtemp(prefix="strata-overload-"))
    bench = Bench(args, tmp)
    try:
        load_before = os.getloadavg()
        bench.warm_up(full_s=args.warm_s)
        rss_first = _rss(bench.proc.pid)
        cap = bench.phase("capacity", None)
        capacity = cap.goodput_fps
        phases = [cap]
        for k in (float(x) for x in args.loads.split(",")):
            time.sleep(2.5)  # the previous phase's cameras stop counting as active
            phases.append(bench.phase(f"{k:g}x", k * capacity))
        rss_last = _rss(bench.proc.pid)
    finally:
        bench.close()
    doc: dict[str, Any] = {
        "machine": cpu_line(),
        "loadavg_before": load_before,
        "command": args.command_line,
        "delay_target_ms": args.delay_target_ms,
        "capacity_fps": capacity,
        "edge_rss_mb": {"after_warm_up": rss_first, "end": rss_last},
        "phases": [asdict(ph) for ph in phases],
        "loadavg_after": os.getloadavg(),
    }
    text = json.dumps(doc, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(report(phases, capacity))
    print(
        f"capacity {capacity:.1f} frames/s; edge RSS {rss_first:.0f} MB after warm-up, "
        f"{rss_last:.0f} MB at the end ({100 * (rss_last / rss_first - 1):+.1f} %); "
        f"delay target {args.delay_target_ms:g} ms; "
        f"{cpu_line()}; load {load_before} -> {os.getloadavg()}"
    )
    return 0
