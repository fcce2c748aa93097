"""The real edge node (CPU, in this process) against a simulator trace, per policy.

One DEALER per camera sends raw BGR frames at the trace's arrival times (open loop: it
does not wait for acks, like bursty cameras); a SUB counts every published result and
times it from its send. Offered = answered + shed (the node's overload drops) is checked.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import zmq
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.metrics import sample
from strata.shared.models import ModelRepository
from strata.shared.synthetic import SyntheticClip
from strata.shared.wire import is_events_topic, pack_frame
from strata.tools.bench.nodes import start_edge_node
from strata.tools.bench.schedsim import Trace, make_trace


@dataclass(frozen=True, slots=True)
class NodeResult:
    """One policy on the real node."""

    policy: str
    trace: str
    offered: int
    answered: int
    shed: int
    unaccounted: int
    mean_reward: float
    throughput_fps: float
    goodput_fps: float
    p50_ms: float
    p99_ms: float
    mean_batch: float
    loadavg: str


def _config(policy: str, q_table: str, deadline_shed: bool = False) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "runtime": {"max_batch": 8, "opt_batch": 4},
            "batching": {"max_batch": 8, "queue_per_camera": 8},
            "scheduler": {"policy": policy, "q_table": q_table},
            # GPU pressure's inference SLA (100 ms) is a GPU figure: off, so the runs
            # compare the policies alone.
            "overload": {
                "deadline": {"enabled": deadline_shed},
                "gpu_pressure": {"enabled": False},
            },
        }
    )


def run_policy(
    policy: str, q_table: str, trace: Trace, cameras: int, sla_s: float, deadline_shed: bool = False
) -> NodeResult:
    """Replay `trace` into a fresh node running `policy` (with deadline shedding)."""
    model = ModelRepository().file_of("yolov8n")[2]
    # A copy of the warm table: the node saves what it learns at stop.
    node, ep = start_edge_node(_config(policy, q_table, deadline_shed), model)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(ep.publish)
    dealers = []
    for _ in range(cameras):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(ep.listen)
        dealers.append(d)
    clip = SyntheticClip(width=320, height=240, frames=20, objects=4, seed=3)
    images = [np.ascontiguousarray(clip.frame(i).image) for i in range(20)]
    time.sleep(0.5)
    sent_at: dict[tuple[str, int], float] = {}
    lock = threading.Lock()
    stop = threading.Event()
    seqs = [0] * cameras

    def send() -> None:
        t0 = time.perf_counter()
        for k, (t, cam) in enumerate(
            zip(trace.times.tolist(), trace.cameras.tolist(), strict=True)
        ):
            delay = t0 + t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            seqs[cam] += 1
            img = images[k % len(images)]
            hdr = frame_pb2.FrameHeader(
                camera_id=f"cam{cam}",
                sequence=seqs[cam],
                width=img.shape[1],
                height=img.shape[0],
                encoding=common_pb2.ENCODING_BGR,
                capture_ns=time.time_ns(),
                send_ns=time.time_ns(),
                frame_index=k,
            )
            with lock:
                sent_at[(f"cam{cam}", seqs[cam])] = time.perf_counter()
            dealers[cam].send_multipart(pack_frame(hdr, img), copy=False)

    def drain() -> None:
        poller = zmq.Poller()
        for d in dealers:
            poller.register(d, zmq.POLLIN)
        while not stop.is_set():
            for sock, _ev in poller.poll(100):
                sock.recv_multipart()

    sender = threading.Thread(target=send)
    drainer = threading.Thread(target=drain)
    sender.start()
    drainer.start()
    latencies: list[float] = []
    rewards: list[float] = []
    offered = len(trace.times)
    reg = node.metrics.registry
    deadline = time.monotonic() + trace.duration + 120
    last_reward_n = 0.0

    def not_taken() -> int:
        # Open-loop senders never resend: a BUSY answer (over the camera's credit) is a
        # frame the node did not take; SHED ones it took and gave up (deadline).
        return int(
            sample(reg, "strata_edge_frames_total", {"status": "busy"})
            + sample(reg, "strata_edge_frames_total", {"status": "shed"})
            + sample(reg, "strata_edge_drops_total", {"reason": "overload"})
        )

    try:
        while time.monotonic() < deadline:
            shed = not_taken()
            if len(latencies) + shed >= offered and not sender.is_alive():
                break
            n = sample(
                reg, "strata_edge_scheduler_decisions_total", {"policy": node.scheduler.name}
            )
            if n > last_reward_n:
                rewards.append(sample(reg, "strata_edge_scheduler_reward"))
                last_reward_n = n
            if not sub.poll(200):
                continue
            topic, body = sub.recv_multipart()
            if is_events_topic(topic):  # track events: not a frame's result
                continue
            now = time.perf_counter()
            msg = frame_pb2.FrameDetections()
            msg.ParseFromString(body)
            with lock:
                t_sent = sent_at.pop((msg.camera_id, msg.sequence), None)
            if t_sent is not None:
                latencies.append(now - t_sent)
        span = time.perf_counter()
    finally:
        stop.set()
        sender.join(timeout=5)
        drainer.join(timeout=5)
        shed = not_taken()
        batches = sample(reg, "strata_edge_batch_size_count")
        mean_batch = sample(reg, "strata_edge_batch_size_sum") / batches if batches else 0.0
        node.stop()
        ctx.destroy(linger=0)
    del span
    lat = np.asarray(latencies) if latencies else np.zeros(1)
    return NodeResult(
        policy=policy + ("+deadline" if deadline_shed else ""),
        trace=trace.name,
        offered=offered,
        answered=len(latencies),
        shed=shed,
        unaccounted=offered - len(latencies) - shed,
        mean_reward=float(np.mean(rewards)) if rewards else 0.0,
        throughput_fps=len(latencies) / trace.duration,
        goodput_fps=float((lat <= sla_s).sum()) / trace.duration,
        p50_ms=float(np.percentile(lat, 50) * 1e3),
        p99_ms=float(np.percentile(lat, 99) * 1e3),
        mean_batch=mean_batch,
        loadavg=Path("/proc/loadavg").read_text().split(" ")[0],
    )


def run_node(args: argparse.Namespace) -> int:
    """`strata bench scheduler node`: each policy on the same trace, one after the other."""
    trace = make_trace(args.kind, args.cameras, args.base_fps, args.duration, seed=args.seed)
    results = []
    policies = args.policy or ["rule", "learned"]
    for k in range(args.rounds):
        # Alternate which policy goes first: load drifts hit both alike over the rounds.
        for policy in policies if k % 2 == 0 else policies[::-1]:
            q = ""
            if policy == "learned" and args.q_table:
                # A fresh copy each time: the node saves what it learned at stop.
                q = str(Path(tempfile.mkdtemp()) / "q.json")
                shutil.copyfile(args.q_table, q)
            r = run_policy(policy, q, trace, args.cameras, 1.0, args.deadline_shed)
            results.append(r)
            print(json.dumps(asdict(r)), flush=True)
    for policy in policies:
        rs = [r for r in results if r.policy.split("+")[0] == policy]
        print(
            f"{policy}: median p99 {np.median([r.p99_ms for r in rs]):.0f} ms, "
            f"goodput {np.median([r.goodput_fps for r in rs]):.2f} fps over {len(rs)} runs",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0
