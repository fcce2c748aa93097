"""The relevance gate's per-camera head: logistic regression on a frozen backbone's pooled
features, learned online (numpy, no PyTorch) from the edge's own answers, and the held-out
agreement that decides whether it may drop frames.

Labels: a frame the edge answered with at least one object (its `FrameAck.objects`) is
positive, one answered with none negative. The head is class-balanced (each sample weighs
1/2 over its class's share of what the head has seen) so a camera that is empty most of
the day still learns its rare object frames; features are standardised with running
statistics (Welford), and every answer is one SGD step on it plus a replay of a few recent
samples of each class (a small ring per class), which settles the head within a few
hundred answers on a fixed camera.

Held-out agreement: one frame in `holdout_every` that reaches the gate is a probe. A probe
is always sent, never trained on, and the head's verdict on it (made before its answer
came) is compared with the edge's answer: the rolling recall of object frames over the
last `window` probes is the gate's agreement. The gate drops frames only while that
recall is at least `min_recall` over at least `min_positives` object probes and
`min_negatives` empty ones; below, it keeps every frame again (switched off) until the
recall recovers.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class HeadSettings:
    """How the head learns and when it may drop (device.gate.site)."""

    learning_rate: float = 0.05
    l2: float = 1e-4
    # Samples of each class kept for replay, and how many of each are replayed per answer.
    replay: int = 256
    replay_batch: int = 8
    # Drop a frame when the head's probability of an object is under this.
    drop_below: float = 0.2
    # The agreement: rolling recall of object frames over held-out probes.
    holdout_every: int = 5
    window: int = 300
    min_recall: float = 0.98
    min_positives: int = 50
    min_negatives: int = 50
    min_training: int = 100


@dataclass(frozen=True, slots=True)
class Agreement:
    """The head's held-out agreement with the edge, over the rolling probe window."""

    positives: int  # object probes in the window
    negatives: int  # empty probes in the window
    recall: float | None  # object probes the head would keep, share (None: no positives)
    dropped_share: float | None  # empty probes the head would drop, share (None: none)

    def passes(self, s: HeadSettings) -> bool:
        """Enough probes of each kind, and the recall at least `min_recall`."""
        return (
            self.positives >= s.min_positives
            and self.negatives >= s.min_negatives
            and self.recall is not None
            and self.recall >= s.min_recall
        )


# The gate's states, as strata_device_gate_site_state and the console say them.
GATE_STATES = ("training", "off", "on")


def gate_state(on: bool, samples: int, a: Agreement, s: HeadSettings) -> str:
    """`on`: it drops frames. `off`: it keeps every frame, its held-out recall under
    `min_recall` over object probes enough (`min_positives`) to say so. `training`: it keeps
    every frame, short of the training samples or of the probes its agreement needs."""
    if on:
        return "on"
    if (
        samples >= s.min_training
        and a.positives >= s.min_positives
        and a.recall is not None
        and a.recall < s.min_recall
    ):
        return "off"
    return "training"


class OnlineHead:
    """Class-balanced logistic regression on standardised features, SGD in numpy."""

    def __init__(self, dim: int, settings: HeadSettings, seed: int = 0) -> None:
        self.s = settings
        self.dim = dim
        self.w = np.zeros(dim, np.float64)
        self.b = 0.0
        self.seen = [0, 0]  # training samples per class (0: empty, 1: object)
        self._mean = np.zeros(dim, np.float64)
        self._m2 = np.zeros(dim, np.float64)
        self._n = 0
        self._rings: list[deque[np.ndarray]] = [
            deque(maxlen=settings.replay),
            deque(maxlen=settings.replay),
        ]
        self._rng = np.random.default_rng(seed)

    @property
    def samples(self) -> int:
        """Training samples so far."""
        return self.seen[0] + self.seen[1]

    def _standardise(self, x: np.ndarray) -> np.ndarray:
        if self._n < 2:
            return x - self._mean
        std = np.sqrt(self._m2 / (self._n - 1)) + 1e-6
        out: np.ndarray = (x - self._mean) / std
        return out

    def probability(self, features: np.ndarray) -> np.ndarray:
        """P(object) for each row of `features` (n, dim); 1.0 while untrained (keep)."""
        x = np.atleast_2d(np.asarray(features, np.float64))
        if min(self.seen) == 0:
            return np.ones(len(x), np.float64)
        z = self._standardise(x) @ self.w + self.b
        out: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))
        return out

    def learn(self, features: np.ndarray, positive: bool) -> None:
        """One answered frame: update the statistics, one SGD step on it and a replay."""
        x = np.asarray(features, np.float64).reshape(-1)
        if x.shape[0] != self.dim:
            raise ValueError(f"features of {x.shape[0]} values, the head takes {self.dim}")
        self._n += 1
        delta = x - self._mean
        self._mean += delta / self._n
        self._m2 += delta * (x - self._mean)
        y = int(positive)
        self.seen[y] += 1
        self._rings[y].append(x)
        batch_x = [x]
        batch_y = [y]
        for cls, ring in enumerate(self._rings):
            if not ring:
                continue
            k = min(self.s.replay_batch, len(ring))
            for i in self._rng.choice(len(ring), size=k, replace=False):
                batch_x.append(ring[int(i)])
                batch_y.append(cls)
        self._step(np.stack(batch_x), np.asarray(batch_y, np.float64))

    def _step(self, x: np.ndarray, y: np.ndarray) -> None:
        total = self.samples
        # Class-balanced weights: each class carries half the loss whatever its share.
        weight = np.where(
            y > 0.5, total / (2.0 * max(self.seen[1], 1)), total / (2.0 * max(self.seen[0], 1))
        )
        xs = self._standardise(x)
        z = xs @ self.w + self.b
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))
        g = weight * (p - y) / len(y)
        self.w -= self.s.learning_rate * (xs.T @ g + self.s.l2 * self.w)
        self.b -= self.s.learning_rate * float(g.sum())


class HeldOut:
    """The rolling window of probes: (the head's keep verdict, the edge's answer)."""

    def __init__(self, window: int) -> None:
        self._probes: deque[tuple[bool, bool]] = deque(maxlen=window)

    def add(self, kept: bool, positive: bool) -> None:
        """One answered probe."""
        self._probes.append((kept, positive))

    def agreement(self) -> Agreement:
        """Recall of object probes and share of empty probes dropped, over the window."""
        pos = [k for k, p in self._probes if p]
        neg = [k for k, p in self._probes if not p]
        recall = sum(pos) / len(pos) if pos else None
        dropped = (len(neg) - sum(neg)) / len(neg) if neg else None
        return Agreement(len(pos), len(neg), recall, dropped)

    def clear(self) -> None:
        """Forget every probe (a new scene: the old verdicts say nothing of it)."""
        self._probes.clear()


def is_probe(index: int, every: int) -> bool:
    """Whether the frame (its camera's frame index) is a held-out probe: one in `every`,
    spread by a multiplicative hash so the probes do not beat with the motion gate."""
    if every <= 1:
        return True
    return ((index * 2654435761) & 0xFFFFFFFF) % every == 0


def fmt_share(v: float | None) -> str:
    """`0.983` or `-` (for logs and status lines)."""
    return "-" if v is None or math.isnan(v) else f"{v:.3f}"
