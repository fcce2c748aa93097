"""Trace-driven simulator of the edge node's batcher (`strata bench scheduler`).

The service model is the node's measured batch-latency curve (seconds per batch of b
frames on this machine's CPU, `curve` measures it; interpolated between the measured
sizes, with log-normal noise). Arrivals come from traces (steady Poisson, bursty on/off,
and a 10x burst); per-camera bounded queues shed their oldest frame like the node's;
one batch runs at a time (the CPU node has one slot). The same `BatchPolicy` classes
the node runs decide every `decide_every_s` of simulated time, so the rule and the learned
policy see the very same traces. Reported per policy and trace: mean reward, throughput,
goodput (frames answered within the SLA per second), p50/p99 of answered frames, shed.

    strata bench scheduler curve            # measure the curve (ONNX Runtime CPU)
    strata bench scheduler compare --json out.json --q-table q.json
    strata bench scheduler node --q-table q.json   # the real node, same traces
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from strata.edge.inference.scheduler import (
    BatchPolicy,
    QLearningPolicy,
    RulePolicy,
    SchedulerWindow,
)
from strata.shared.config.edge import SchedulerConfig
from strata.shared.runtime import create_runner

# Seconds per batch of YOLOv8n 320 (starter repository) on ONNX Runtime CPU, 2 threads,
# measured with `strata bench scheduler curve` on this project's 2-core machine
# (shared; load average about 12, see docs/benchmarks.md). Batching pays on this CPU:
# 213 ms for one frame, 123 ms per frame in a batch of eight.
MEASURED_CPU_CURVE: dict[int, float] = {1: 0.213, 2: 0.365, 4: 0.621, 8: 0.984}


@dataclass(frozen=True, slots=True)
class Trace:
    """Arrival times (s, sorted) and the camera of each."""

    name: str
    times: np.ndarray
    cameras: np.ndarray
    duration: float


def make_trace(
    kind: str, cameras: int, base_fps: float, duration: float, seed: int, burst_x: float = 10.0
) -> Trace:
    """steady: Poisson at base_fps per camera; bursty: on/off, 3x for 5-15 s every
    20-40 s; burst10x: steady with burst_x times the rate from 40 % to 60 % of the trace."""
    rng = np.random.default_rng(seed)

    def rate(t: float) -> float:
        return base_fps

    windows: list[tuple[float, float, float]] = []
    if kind == "bursty":
        t = float(rng.uniform(5, 15))
        while t < duration:
            length = float(rng.uniform(5, 15))
            windows.append((t, t + length, 3.0))
            t += length + float(rng.uniform(20, 40))
    elif kind == "burst10x":
        windows.append((0.4 * duration, 0.6 * duration, burst_x))
    elif kind != "steady":
        raise ValueError(f"unknown trace kind {kind!r} (steady, bursty, burst10x)")
    peak = base_fps * max([1.0] + [w[2] for w in windows])
    times, cams = [], []
    for cam in range(cameras):
        # Thinning: Poisson at the peak rate, each arrival kept with rate(t) / peak.
        n = rng.poisson(peak * duration)
        ts = np.sort(rng.uniform(0, duration, n))
        mult = np.ones(n)
        for a, b, x in windows:
            mult[(ts >= a) & (ts < b)] = x
        keep = rng.uniform(0, 1, n) < (rate(0) * mult) / peak
        times.append(ts[keep])
        cams.append(np.full(int(keep.sum()), cam))
    t_all = np.concatenate(times)
    c_all = np.concatenate(cams)
    order = np.argsort(t_all, kind="stable")
    return Trace(kind, t_all[order], c_all[order], duration)


class ServiceModel:
    """Seconds for a batch of b frames: the measured curve, linear between its points."""

    def __init__(self, curve: dict[int, float], noise: float, seed: int) -> None:
        self.sizes = np.array(sorted(curve), np.float64)
        self.secs = np.array([curve[int(b)] for b in self.sizes], np.float64)
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def mean(self, b: int) -> float:
        if b > self.sizes[-1]:
            # Beyond the curve: the last per-frame cost.
            return float(self.secs[-1] / self.sizes[-1] * b)
        return float(np.interp(b, self.sizes, self.secs))

    def __call__(self, b: int) -> float:
        return self.mean(b) * float(self.rng.lognormal(0.0, self.noise))


@dataclass(frozen=True, slots=True)
class SimResult:
    """One policy on one trace."""

    policy: str
    trace: str
    offered: int
    answered: int
    shed: int
    mean_reward: float
    throughput_fps: float
    goodput_fps: float
    p50_ms: float
    p99_ms: float
    mean_batch: float


def simulate(
    trace: Trace,
    policy: BatchPolicy,
    service: ServiceModel,
    cfg: SchedulerConfig,
    queue_per_camera: int,
    cameras: int,
    deadline_s: float = 0.0,
) -> SimResult:
    """Run `policy` over `trace`; every offered frame is answered or shed (checked).

    `deadline_s` > 0: before a batch starts, frames that would finish later than that
    after their arrival are shed (deadline-aware admission, the same for every policy)."""
    window = SchedulerWindow(cfg.sla_ms / 1e3, cameras * queue_per_camera)
    queues: list[deque[float]] = [deque() for _ in range(cameras)]
    order: deque[int] = deque()
    total = 0
    shed = 0
    latencies: list[float] = []
    rewards: list[float] = []
    batches: list[int] = []
    busy_until = 0.0
    running: list[float] = []  # arrival times of the batch being served
    window_energy = 0.0
    next_epoch = cfg.decide_every_s
    i, n = 0, len(trace.times)
    now = 0.0

    def shed_late(t: float, b: int) -> None:
        nonlocal total, shed
        finish = t + service.mean(b)
        for cam in list(order):
            q = queues[cam]
            while q and finish - q[0] > deadline_s:
                q.popleft()
                total -= 1
                shed += 1
                window.add_shed()
            if not q:
                order.remove(cam)

    def launch(t: float) -> float:
        nonlocal total
        dec = policy.current()
        if deadline_s > 0:
            shed_late(t, min(total, dec.max_batch))
            if not total:
                running.clear()
                return t
        take: list[float] = []
        while order and len(take) < dec.max_batch:
            cam = order.popleft()
            take.append(queues[cam].popleft())
            if queues[cam]:
                order.append(cam)
        total -= len(take)
        policy.on_batch([t - a for a in take])
        window.add_batch(len(take))
        batches.append(len(take))
        running[:] = take
        return t + service(len(take))

    while i < n or total or running:
        # The next event: an arrival, the batch finishing, a decision, or a due release.
        dec = policy.current()
        candidates = [next_epoch]
        if i < n:
            candidates.append(float(trace.times[i]))
        if running:
            candidates.append(busy_until)
        elif total:
            oldest = min(q[0] for q in queues if q)
            candidates.append(max(now, oldest + dec.max_delay_s))
        now = min(candidates)
        if running and busy_until <= now:
            latencies_b = [busy_until - a for a in running]
            latencies.extend(latencies_b)
            window.add_latencies(latencies_b)
            window_energy += service.mean(len(running))
            running.clear()
        while i < n and trace.times[i] <= now:
            cam = int(trace.cameras[i])
            if not queues[cam]:
                order.append(cam)
            if len(queues[cam]) >= queue_per_camera:
                queues[cam].popleft()
                total -= 1
                shed += 1
                window.add_shed()
            queues[cam].append(float(trace.times[i]))
            total += 1
            i += 1
        if now >= next_epoch:
            stats = window.close(cfg.decide_every_s, total, window_energy)
            window_energy = 0.0
            rewards.append(stats.reward)
            policy.on_window(stats)
            next_epoch += cfg.decide_every_s
        if not running and total:
            dec = policy.current()
            oldest = min(q[0] for q in queues if q)
            if total >= dec.max_batch or now >= oldest + dec.max_delay_s - 1e-12:
                busy_until = launch(now)
    answered = len(latencies)
    assert answered + shed == n, (answered, shed, n)
    lat = np.asarray(latencies) if latencies else np.zeros(1)
    sla = cfg.sla_ms / 1e3
    span = max(trace.duration, now)
    return SimResult(
        policy=policy.name,
        trace=trace.name,
        offered=n,
        answered=answered,
        shed=shed,
        mean_reward=float(np.mean(rewards)) if rewards else 0.0,
        throughput_fps=answered / span,
        goodput_fps=float((lat <= sla).sum()) / span if latencies else 0.0,
        p50_ms=float(np.percentile(lat, 50) * 1e3),
        p99_ms=float(np.percentile(lat, 99) * 1e3),
        mean_batch=float(np.mean(batches)) if batches else 0.0,
    )


@dataclass(frozen=True, slots=True)
class SimSetup:
    """What every policy of a comparison shares."""

    cameras: int = 4
    base_fps: float = 0.5
    duration_s: float = 300.0
    queue_per_camera: int = 8
    max_batch: int = 8
    max_delay_ms: float = 10.0
    delay_target_ms: float = 200.0
    adapt_every: int = 8
    noise: float = 0.1
    train_s: float = 10800.0
    seed: int = 1
    # > 0: deadline-aware admission for every policy (simulate's deadline_s).
    deadline_s: float = 0.0


def rule_policy(s: SimSetup) -> RulePolicy:
    """Today's rule with the node's defaults (the ceiling as the learned one's)."""
    return RulePolicy(s.max_batch, 1, s.delay_target_ms / 1e3, s.adapt_every, s.max_delay_ms / 1e3)


def static_policy(s: SimSetup) -> RulePolicy:
    """The max batch and delay, never adapted (the rule with its target off)."""
    p = RulePolicy(s.max_batch, 1, 0.0, s.adapt_every, s.max_delay_ms / 1e3)
    p.name = "static"
    return p


def train(s: SimSetup, cfg: SchedulerConfig, curve: dict[int, float]) -> QLearningPolicy:
    """On-line training on traces of other seeds than the evaluation's (all three kinds)."""
    policy = QLearningPolicy(cfg, s.max_batch, s.max_delay_ms / 1e3)
    per = s.train_s / 3
    for k, kind in enumerate(("bursty", "burst10x", "steady")):
        trace = make_trace(kind, s.cameras, s.base_fps, per, seed=1000 + s.seed + k)
        service = ServiceModel(curve, s.noise, 7 + k)
        simulate(trace, policy, service, cfg, s.queue_per_camera, s.cameras, s.deadline_s)
    return policy


def compare(
    s: SimSetup,
    cfg: SchedulerConfig,
    curve: dict[int, float],
    kinds: Sequence[str] = ("bursty", "burst10x", "steady"),
    q_table: str = "",
) -> list[SimResult]:
    """Rule, static, learned cold (no training) and learned warm (trained first) on the
    same evaluation traces (same service noise seed too)."""
    warm = train(s, cfg, curve)
    if q_table:
        warm.save(q_table)
    bandit_cfg = cfg.model_copy(update={"discount": 0.0})
    bandit = train(s, bandit_cfg, curve)
    bandit.name = "bandit"
    out = []
    for k, kind in enumerate(kinds):
        trace = make_trace(kind, s.cameras, s.base_fps, s.duration_s, seed=s.seed + k)
        cold = QLearningPolicy(cfg, s.max_batch, s.max_delay_ms / 1e3)
        cold.name = "learned-cold"
        for policy in (rule_policy(s), static_policy(s), cold, bandit, warm):
            service = ServiceModel(curve, s.noise, 100 + k)
            out.append(
                simulate(trace, policy, service, cfg, s.queue_per_camera, s.cameras, s.deadline_s)
            )
    return out


def mean_over_seeds(results: Sequence[SimResult]) -> list[SimResult]:
    """One row per (trace, policy): the mean of each figure over the seeds."""
    groups: dict[tuple[str, str], list[SimResult]] = {}
    for r in results:
        groups.setdefault((r.trace, r.policy), []).append(r)
    out = []
    for (trace, policy), rs in groups.items():
        out.append(
            SimResult(
                policy=policy,
                trace=trace,
                offered=sum(r.offered for r in rs),
                answered=sum(r.answered for r in rs),
                shed=sum(r.shed for r in rs),
                mean_reward=float(np.mean([r.mean_reward for r in rs])),
                throughput_fps=float(np.mean([r.throughput_fps for r in rs])),
                goodput_fps=float(np.mean([r.goodput_fps for r in rs])),
                p50_ms=float(np.mean([r.p50_ms for r in rs])),
                p99_ms=float(np.mean([r.p99_ms for r in rs])),
                mean_batch=float(np.mean([r.mean_batch for r in rs])),
            )
        )
    return out


def measure_curve(model: Path, sizes: Sequence[int], threads: int, rounds: int) -> dict[int, float]:
    """Median seconds per batch of each size, the runtime alone (ONNX Runtime CPU)."""
    runner = create_runner(model, "onnxruntime-cpu", threads=threads)
    shape = runner.inputs[0].shape
    side = int(shape[2] or 320)
    out: dict[int, float] = {}
    try:
        for b in sizes:
            x = np.random.default_rng(0).random((b, 3, side, side), np.float32)
            runner.run(x)
            ts = []
            for _ in range(rounds):
                t = time.perf_counter()
                runner.run(x)
                ts.append(time.perf_counter() - t)
            out[b] = float(np.median(ts))
    finally:
        runner.close()
    return out


def table(results: Sequence[SimResult]) -> str:
    lines = [
        "| trace | policy | reward | throughput fps | goodput fps | p50 ms | p99 ms | "
        "shed | mean batch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.trace} | {r.policy} | {r.mean_reward:.3f} | {r.throughput_fps:.2f} | "
            f"{r.goodput_fps:.2f} | {r.p50_ms:.0f} | {r.p99_ms:.0f} | {r.shed}/{r.offered} | "
            f"{r.mean_batch:.1f} |"
        )
    return "\n".join(lines)
