"""Where kept frames go, at a fixed budget: uniform, a track-risk gate, and a clairvoyant one.

The question behind issue 12's "gate at least 0.05 box F1 above uniform at equal frames
kept": how much can any choice of frames gain over keeping every k-th one, with the edge's
own answering (tracker, interpolation) for the rest? Three placements at the same budget,
each scored by replaying the reference run (the detector on every frame) through
`strata.edge.tracking.calibration.replay`, exactly as the bench scores uniform sampling:

- uniform: every k-th frame;
- track risk (causal, what an edge could feed back to the device): after each kept frame,
  the next gap is the first frame at which, by the live tracks' constant-velocity
  prediction, two tracked objects come within `close` box heights of each other or one
  reaches the frame's border band (`border`), clipped to [gmin, gmax]; every setting of a
  small grid is tried and those landing near the budget are compared with uniform at
  their own share;
- clairvoyant: with hindsight of the reference, each next kept frame is the farthest one
  whose gap the edge's own tracker and interpolation answer with at most a set number of
  wrong boxes per frame; the setting nearest each budget is compared. It knows every
  frame's answer, so no device can do it: it shows what placement alone could gain.

`strata bench placement data/vtest.mp4 --work DIR` runs the reference
(the three daemons, gates off, as `strata bench` does) unless DIR/reference.npz exists.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from strata.edge.tracking.answers import Answers, interpolate
from strata.edge.tracking.calibration import class_boxes, replay, uniform
from strata.edge.tracking.tracker import Tracker
from strata.shared.config.base import merge
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes
from strata.shared.vision.agreement import agreement
from strata.shared.vision.boxes import match_count
from strata.tools.bench.cascade import GATES_OFF, NO_SHEDDING, Labels, boxes_of, run_once


@dataclass(frozen=True, slots=True)
class Placed:
    """One placement's share of frames kept and its agreement with the reference."""

    name: str
    kept: float
    f1: float
    counting: float
    uniform_f1: float
    uniform_counting: float


def score(
    reference: Sequence[FrameBoxes], kept: np.ndarray, cfg: TrackingConfig, size: tuple[int, int]
) -> tuple[float, float]:
    """Box F1 and counting of keeping `kept`, the edge's answers for the rest."""
    out = replay(reference, kept, cfg, *size)
    a = agreement(reference, [class_boxes(o) for o in out])
    return a.f1, a.counting


def track_risk(
    reference: Sequence[FrameBoxes],
    cfg: TrackingConfig,
    size: tuple[int, int],
    gmin: int,
    gmax: int,
    close: float,
    border: float,
) -> np.ndarray:
    """The kept mask of the causal track-risk gate (see the module's docstring)."""
    w, h = size
    answers = Answers(cfg.model_copy(update={"hold_s": 1e9}))
    kept = np.zeros(len(reference), bool)
    due = 0
    steps = np.arange(1, gmax + 1, dtype=np.float64)
    for i, dets in enumerate(reference):
        head = frame_pb2.FrameHeader(
            camera_id="placement", session_id=1, frame_index=i, width=w, height=h
        )
        if i < due:
            answers.skipped(head, 0.0, 0)
            answers.ready(now=0.0)
            continue
        kept[i] = True
        answers.expect(head)
        answers.detected(head, dets)
        tracker = answers.tracker(1, "placement")
        gap = gmax
        if tracker is not None and len(tracker):
            centre, velocity, height = tracker.motion(i)
            # (steps, tracks, 2): every live track's centre at each future frame.
            path = centre[None] + steps[:, None, None] * velocity[None]
            risky = (
                (path[..., 0] < border * w)
                | (path[..., 0] > (1 - border) * w)
                | (path[..., 1] < border * h)
                | (path[..., 1] > (1 - border) * h)
            ).any(axis=1)
            if close > 0 and len(height) > 1:
                d = np.linalg.norm(path[:, :, None] - path[:, None], axis=3)
                d /= (height[:, None] + height[None]) / 2
                d[:, range(len(height)), range(len(height))] = np.inf
                risky |= (d < close).any(axis=(1, 2))
            hit = np.flatnonzero(risky)
            if hit.size:
                gap = int(hit[0]) + 1
        due = i + max(gap, gmin)
    return kept


def clairvoyant(
    reference: Sequence[FrameBoxes], cfg: TrackingConfig, budget: float, max_gap: int = 15
) -> np.ndarray:
    """Greedy with hindsight: from each kept frame, the farthest next one (up to `max_gap`)
    whose gap the edge's tracker and interpolation answer with at most `budget` wrong boxes
    (false positives + negatives against the reference) per dropped frame."""
    n = len(reference)
    kept = np.zeros(n, bool)
    tracker = Tracker(cfg)
    a, at = 0, tracker.update(0, reference[0])
    kept[0] = True
    while a < n - 1:
        choice = None
        for g in range(1, min(max_gap, n - 1 - a) + 1):
            b = a + g
            trial = copy.deepcopy(tracker)
            bt = trial.update(b, reference[b])
            wrong = 0
            for j in range(a + 1, b):
                o = class_boxes(interpolate(at, bt, (j - a) / g))
                wrong += len(o) + len(reference[j]) - 2 * match_count(reference[j], o)
            if g == 1 or wrong <= budget * (g - 1):
                choice = (b, trial, bt)
        assert choice is not None
        a, tracker, at = choice
        kept[a] = True
    return kept


def compare(
    reference: Sequence[FrameBoxes],
    size: tuple[int, int],
    budgets: Sequence[float] = (0.2, 0.4),
    cfg: TrackingConfig | None = None,
    tolerance: float = 0.03,
) -> list[Placed]:
    """Uniform, the best track-risk setting near each budget, and the clairvoyant placement,
    each with uniform at its own share beside it."""
    cfg = cfg or TrackingConfig(answer="interpolate")
    n = len(reference)
    out: list[Placed] = []
    grid = itertools.product((2, 3, 4, 5), (4, 6, 8, 10), (0.0, 0.4, 0.7), (0.0, 0.05))
    risk = [track_risk(reference, cfg, size, *g) for g in grid]
    hindsight = [clairvoyant(reference, cfg, b) for b in (0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2)]
    for budget in budgets:
        u = score(reference, uniform(n, budget), cfg, size)
        out.append(Placed("uniform", budget, *u, *u))
        near = [k for k in risk if abs(k.mean() - budget) <= tolerance]
        gains = []
        for k in near:
            s = score(reference, k, cfg, size)
            us = score(reference, uniform(n, float(k.mean())), cfg, size)
            gains.append(Placed("track risk (best setting)", float(k.mean()), *s, *us))
        if gains:
            out.append(max(gains, key=lambda p: p.f1 - p.uniform_f1))
        oracle = min(hindsight, key=lambda k: abs(k.mean() - budget))
        s = score(reference, oracle, cfg, size)
        us = score(reference, uniform(n, float(oracle.mean())), cfg, size)
        out.append(Placed("clairvoyant", float(oracle.mean()), *s, *us))
    return out


def save_reference(path: Path, reference: Sequence[FrameBoxes], size: tuple[int, int]) -> None:
    """The reference boxes and frame size as an .npz."""
    arrays: dict[str, np.ndarray] = {"size": np.array(size), "n": np.array(len(reference))}
    for i, r in enumerate(reference):
        arrays[f"b{i}"], arrays[f"s{i}"], arrays[f"c{i}"] = r.boxes, r.scores, r.class_ids
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


def load_reference(path: Path) -> tuple[list[FrameBoxes], tuple[int, int]]:
    """What `save_reference` wrote."""
    z = np.load(path)
    ref = [FrameBoxes(z[f"b{i}"], z[f"s{i}"], z[f"c{i}"]) for i in range(int(z["n"]))]
    w, h = (int(v) for v in z["size"])
    return ref, (w, h)


def run_reference(clip: Path, work: Path) -> tuple[list[FrameBoxes], tuple[int, int]]:
    """The detector on every frame, through the real daemons (as `strata bench` runs it)."""
    run = run_once(work / "reference", clip, merge(NO_SHEDDING, GATES_OFF), 1800.0)
    got = boxes_of(run.results, Labels())
    total = max(got, default=-1) + 1
    first = next(iter(run.results.values()), None)
    size = (int(first.message.width), int(first.message.height)) if first else (0, 0)
    return [got.get(i, FrameBoxes.empty()) for i in range(total)], size


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench placement`'s options."""
    p.add_argument("clip", type=Path)
    p.add_argument("--work", type=Path, required=True, help="Run folder; reference.npz kept.")


def run(args: argparse.Namespace) -> int:
    """Print each placement's figures as JSON lines."""
    args.work.mkdir(parents=True, exist_ok=True)
    cached = args.work / "reference.npz"
    if cached.exists():
        reference, size = load_reference(cached)
    else:
        reference, size = run_reference(args.clip, args.work)
        save_reference(cached, reference, size)
    for placed in compare(reference, size):
        print(
            json.dumps(
                {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(placed).items()}
            )
        )
    return 0
