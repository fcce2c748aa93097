"""Batching policies: who sets the batch size limit and the max queue delay.

The node asks its policy for a `BatchDecision` before every batch. Every `decide_every_s`
a `SchedulerWindow` turns what the node measured in that window into a `WindowStats`
and the issue's reward R = 0.6 x throughput + 0.3 x p99 term - 0.1 x energy:

    throughput  frames answered / frames that arrived in the window (clipped to 0..1.5)
    p99 term    1 - p99 latency / SLA (receive to publish), clipped to -2..1
    energy      energy per frame / the most per frame seen so far: NVML's power draw
                where present, else the process's CPU seconds (a proxy)

Two policies: `RulePolicy` is today's rule (halve the limit when a window of batches
misses the queue-delay target, double it back; AdaptiveBatchLimit), `QLearningPolicy`
learns a (batch limit, max delay) pair per state on-line. GPU pressure's
cap still applies on top of whichever policy decides (the node caps the decision).
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from strata.edge.overload.batch_limit import AdaptiveBatchLimit
from strata.shared.config.edge import EdgeConfig, SchedulerConfig

log = logging.getLogger(__name__)

# Reward weights of the design (throughput, p99 against the SLA, energy).
W_THROUGHPUT, W_P99, W_ENERGY = 0.6, 0.3, 0.1
Q_TABLE_VERSION = 1


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """What the batcher does until the next decision."""

    max_batch: int
    max_delay_s: float


@dataclass(frozen=True, slots=True)
class WindowStats:
    """One decision window's measurements (the policy's state) and its reward."""

    seconds: float
    arrived: int
    answered: int
    shed: int
    queue_depth: int
    queue_capacity: int
    p99_latency_s: float
    mean_batch: float
    energy_per_frame: float
    reward: float

    @property
    def fill(self) -> float:
        """Queued frames over what the queues can hold."""
        return self.queue_depth / max(1, self.queue_capacity)


def reward(arrived: int, answered: int, p99_s: float, sla_s: float, energy_ratio: float) -> float:
    """R = 0.6 x throughput + 0.3 x p99 term - 0.1 x energy, each term normalised."""
    throughput = min(1.5, answered / arrived) if arrived else (1.0 if answered else 0.0)
    p99_term = max(-2.0, min(1.0, 1.0 - p99_s / sla_s)) if answered else 0.0
    energy = max(0.0, min(2.0, energy_ratio))
    return W_THROUGHPUT * throughput + W_P99 * p99_term - W_ENERGY * energy


class SchedulerWindow:
    """Accumulates the node's measurements between two decisions (worker thread), and
    frames shed from the queues (ingest thread, hence the lock)."""

    def __init__(self, sla_s: float, queue_capacity: int) -> None:
        self.sla_s = sla_s
        self.queue_capacity = queue_capacity
        self._lock = threading.Lock()
        self._shed = 0
        self._latencies: list[float] = []
        self._batches = 0
        self._batch_frames = 0
        self._depth0 = 0
        self._energy_max = 0.0

    def add_shed(self, n: int = 1) -> None:
        with self._lock:
            self._shed += n

    def add_batch(self, frames: int) -> None:
        self._batches += 1
        self._batch_frames += frames

    def add_latencies(self, latencies_s: Sequence[float]) -> None:
        self._latencies.extend(latencies_s)

    def close(
        self, seconds: float, queue_depth: int, energy: float, queue_capacity: int = 0
    ) -> WindowStats:
        """End the window: its stats and reward; the next window starts empty.

        `energy`: joules (NVML) or CPU seconds used in the window (the proxy);
        `queue_capacity`: what the queues of the cameras seen can hold (0: as built)."""
        if queue_capacity > 0:
            self.queue_capacity = queue_capacity
        with self._lock:
            shed, self._shed = self._shed, 0
        answered = len(self._latencies)
        # Frames that arrived = answered + shed + what the queues grew by.
        arrived = max(0, answered + shed + queue_depth - self._depth0)
        p99 = float(np.percentile(self._latencies, 99)) if answered else 0.0
        per_frame = energy / answered if answered else 0.0
        self._energy_max = max(self._energy_max, per_frame)
        ratio = per_frame / self._energy_max if self._energy_max > 0 else 0.0
        stats = WindowStats(
            seconds=seconds,
            arrived=arrived,
            answered=answered,
            shed=shed,
            queue_depth=queue_depth,
            queue_capacity=self.queue_capacity,
            p99_latency_s=p99,
            mean_batch=self._batch_frames / self._batches if self._batches else 0.0,
            energy_per_frame=per_frame,
            reward=reward(arrived, answered, p99, self.sla_s, ratio),
        )
        self._latencies.clear()
        self._batches = self._batch_frames = 0
        self._depth0 = queue_depth
        return stats


class BatchPolicy(Protocol):
    """Decides the batcher's limits; told about every batch and every window."""

    name: str

    def current(self) -> BatchDecision:
        """The decision in force now."""
        ...

    def on_batch(self, queue_delays_s: Sequence[float]) -> None:
        """One batch left the queues; these are its frames' queue delays."""
        ...

    def on_window(self, stats: WindowStats) -> BatchDecision:
        """A decision window ended; returns the decision for the next one."""
        ...


class RulePolicy:
    """Today's rule: a fixed max delay, the batch limit halved and doubled by the queue
    delay (AdaptiveBatchLimit)."""

    name = "rule"

    def __init__(
        self, max_batch: int, min_batch: int, target_s: float, window: int, max_delay_s: float
    ) -> None:
        self.limit = AdaptiveBatchLimit(max_batch, min_batch, target_s, window)
        self.max_delay_s = max_delay_s

    def current(self) -> BatchDecision:
        return BatchDecision(self.limit.limit, self.max_delay_s)

    def on_batch(self, queue_delays_s: Sequence[float]) -> None:
        self.limit.observe(list(queue_delays_s))

    def on_window(self, stats: WindowStats) -> BatchDecision:
        return self.current()


# State buckets: how full the queues are, and whether they grew in the window.
FILL_EDGES = (0.0, 0.1, 0.3, 0.6)
TREND_EDGES = (0.9, 1.1)


def state_of(stats: WindowStats) -> int:
    """The discrete state of a window: fill bucket (0..4) x trend bucket (0..2)."""
    fill = 0 if stats.queue_depth == 0 else 1 + sum(stats.fill > e for e in FILL_EDGES[1:])
    load = stats.arrived / stats.answered if stats.answered else (2.0 if stats.arrived else 1.0)
    trend = sum(load > e for e in TREND_EDGES)
    return fill * (len(TREND_EDGES) + 1) + trend


STATES = (len(FILL_EDGES) + 1) * (len(TREND_EDGES) + 1)


class QLearningPolicy:
    """Tabular Q-learning over (batch limit, max delay) pairs, trained on-line.

    Exploration is bounded: with probability epsilon (decaying to epsilon_min) it tries a
    neighbour of the greedy action (one step in batch or delay), never a far jump.
    discount 0 makes it a contextual
    bandit (the simulator compares both)."""

    name = "learned"

    def __init__(self, cfg: SchedulerConfig, max_batch: int, max_delay_s: float) -> None:
        batches = sorted({min(b, max_batch) for b in cfg.batch_choices})
        delays = sorted({d / 1e3 for d in cfg.delay_choices_ms})
        self.actions = tuple(BatchDecision(b, d) for b in batches for d in delays)
        self._nb, self._nd = len(batches), len(delays)
        self.cfg = cfg
        self.q = np.zeros((STATES, len(self.actions)), np.float64)
        self.visits = np.zeros((STATES, len(self.actions)), np.int64)
        self.epsilon = cfg.epsilon
        self.explored = 0
        self.decisions = 0
        self._rng = random.Random(cfg.seed)
        # Start where the rule starts: the configured max batch and delay (nearest action).
        self._action = min(
            range(len(self.actions)),
            key=lambda i: (
                abs(self.actions[i].max_batch - max_batch),
                abs(self.actions[i].max_delay_s - max_delay_s),
            ),
        )
        self._state: int | None = None

    def current(self) -> BatchDecision:
        return self.actions[self._action]

    def on_batch(self, queue_delays_s: Sequence[float]) -> None:
        return None

    def on_window(self, stats: WindowStats) -> BatchDecision:
        s2 = state_of(stats)
        if self._state is not None:
            s, a = self._state, self._action
            target = stats.reward + self.cfg.discount * float(self.q[s2].max())
            self.visits[s, a] += 1
            self.q[s, a] += self.cfg.learning_rate * (target - self.q[s, a])
        self._state = s2
        self._action = self._choose(s2, stats)
        self.decisions += 1
        self.epsilon = max(self.cfg.epsilon_min, self.epsilon * self.cfg.epsilon_decay)
        return self.actions[self._action]

    def _choose(self, s: int, stats: WindowStats) -> int:
        row = self.q[s]
        # Ties (unvisited states) keep the action in force: no jump on no evidence.
        best = float(row.max())
        greedy = (
            self._action
            if math.isclose(row[self._action], best)
            else int(np.flatnonzero(np.isclose(row, best))[0])
        )
        if self._rng.random() >= self.epsilon:
            return greedy
        self.explored += 1
        bi, di = divmod(greedy, self._nd)
        near = [
            (bi + db) * self._nd + (di + dd)
            for db, dd in ((-1, 0), (1, 0), (0, -1), (0, 1))
            if 0 <= bi + db < self._nb and 0 <= di + dd < self._nd
        ]
        return self._rng.choice(near) if near else greedy

    # -- warm start ------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the table (JSON) for a warm start elsewhere."""
        doc = {
            "version": Q_TABLE_VERSION,
            "actions": [[a.max_batch, a.max_delay_s] for a in self.actions],
            "q": self.q.tolist(),
            "visits": self.visits.tolist(),
            "epsilon": self.epsilon,
        }
        Path(path).write_text(json.dumps(doc))

    def load(self, path: str | Path) -> bool:
        """Warm-start from a saved table; False (logged) when absent or for other actions."""
        try:
            doc = json.loads(Path(path).read_text())
            actions = [BatchDecision(int(b), float(d)) for b, d in doc["actions"]]
            q = np.asarray(doc["q"], np.float64)
            visits = np.asarray(doc["visits"], np.int64)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("scheduler: Q table %s not loaded (%s); learning from scratch", path, exc)
            return False
        if doc.get("version") != Q_TABLE_VERSION or tuple(actions) != self.actions:
            log.warning(
                "scheduler: Q table %s is for other actions or version; learning from scratch",
                path,
            )
            return False
        if q.shape != self.q.shape or visits.shape != self.q.shape:
            log.warning("scheduler: Q table %s has shape %s; learning from scratch", path, q.shape)
            return False
        self.q, self.visits = q, visits
        self.epsilon = max(self.cfg.epsilon_min, float(doc.get("epsilon", self.cfg.epsilon)))
        log.info("scheduler: warm start from %s (%d visits)", path, int(visits.sum()))
        return True


def make_policy(cfg: EdgeConfig, max_batch: int) -> BatchPolicy:
    """The configured policy for a node whose model takes at most `max_batch`."""
    max_delay_s = cfg.batching.max_queue_delay_ms / 1e3
    if cfg.scheduler.policy == "learned":
        policy = QLearningPolicy(cfg.scheduler, max_batch, max_delay_s)
        if cfg.scheduler.q_table and Path(cfg.scheduler.q_table).is_file():
            policy.load(cfg.scheduler.q_table)
        return policy
    rule = cfg.overload.batch_limit
    target_s = cfg.batching.delay_target_ms / 1e3
    return RulePolicy(max_batch, rule.min_batch, target_s, rule.adapt_every, max_delay_s)


def save_policy(policy: BatchPolicy, cfg: SchedulerConfig) -> None:
    """At clean stop: keep what the learned policy learned (when q_table is set)."""
    if isinstance(policy, QLearningPolicy) and cfg.q_table:
        try:
            policy.save(cfg.q_table)
        except OSError as exc:
            log.warning("scheduler: cannot save the Q table to %s: %s", cfg.q_table, exc)


class SchedulerMetrics:
    """The scheduler's metrics, in the node's registry."""

    def __init__(self, registry: CollectorRegistry, policy: str) -> None:
        self.policy = policy
        self.reward = Gauge(
            "strata_edge_scheduler_reward",
            "Reward of the last decision window (0.6 throughput + 0.3 p99 term - 0.1 energy).",
            registry=registry,
        )
        self.max_delay = Gauge(
            "strata_edge_scheduler_max_delay_seconds",
            "Max queue delay the batching policy set.",
            registry=registry,
        )
        self.window_p99 = Gauge(
            "strata_edge_scheduler_window_p99_seconds",
            "p99 latency (receive to publish) of the last decision window.",
            registry=registry,
        )
        self.decisions = Counter(
            "strata_edge_scheduler_decisions",
            "Decision windows closed, by policy.",
            ["policy"],
            registry=registry,
        )
        self.explored = Counter(
            "strata_edge_scheduler_explorations",
            "Decisions where the learned policy tried a neighbouring action.",
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class LoadReadings:
    """What a decision window reads of the node: frames queued, the queues' capacity,
    the GPUs' power draw (None without a GPU that reports it)."""

    queue_depth: Callable[[], int]
    queue_capacity: Callable[[], int]
    power_w: Callable[[], float | None]


class DecisionClock:
    """Closes a window every `every_s` (called from the node's worker loop) and hands its
    stats to the policy. Energy: NVML power x time where a GPU reports power, else the
    process's CPU seconds."""

    def __init__(
        self,
        policy: BatchPolicy,
        window: SchedulerWindow,
        every_s: float,
        load: LoadReadings,
        metrics: SchedulerMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy, self.window, self.every_s = policy, window, every_s
        self._depth, self._capacity = load.queue_depth, load.queue_capacity
        self._power, self.metrics, self._clock = load.power_w, metrics, clock
        self._start = clock()
        self._cpu = time.process_time()
        self.last: WindowStats | None = None

    def tick(self) -> None:
        now = self._clock()
        seconds = now - self._start
        if seconds < self.every_s:
            return
        cpu = time.process_time()
        power = self._power()
        energy = power * seconds if power is not None else cpu - self._cpu
        self._start, self._cpu = now, cpu
        stats = self.last = self.window.close(seconds, self._depth(), energy, self._capacity())
        explored = getattr(self.policy, "explored", 0)
        decision = self.policy.on_window(stats)
        m = self.metrics
        m.decisions.labels(m.policy).inc()
        if getattr(self.policy, "explored", 0) != explored:
            m.explored.inc()
        m.reward.set(stats.reward)
        m.window_p99.set(stats.p99_latency_s)
        m.max_delay.set(decision.max_delay_s)
