"""Sampling policies on a saved rules run, simulated: which frames the edge gets, and what
the rules then say (`strata bench rules-policy --from DIR`).

A saved `strata bench rules` run (reference.npz) holds the detector's boxes on every
frame of the clip, so any choice of kept frames can be replayed offline: `simulate` walks
the clip frame by frame as the edge would see it (the same `Answers`: kept frames through
the tracker, skipped ones interpolated or predicted; the same `RulesEngine`, fed in
capture order), and asks a `Policy` before each frame whether the device keeps it, and
after each detected frame what it learned (the engine's `needs_frames`, as the rules
stage asks). So a policy is causal by construction unless it is handed the future
(`hindsight`, the rule-aware oracle that shows the ceiling at a share). Scored against
the reference's rule results as the bench scores the cascade (rules_agreement.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from strata.edge.rules.camera_types import Need
from strata.edge.rules.engine import RulesEngine
from strata.edge.tracking.answers import Answers
from strata.edge.tracking.calibration import uniform
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.edge import TrackingConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import events_pb2, frame_pb2
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.bench.rules_agreement import RuleHit, RulesAgreement, compare
from strata.tools.bench.rules_frames import FrameSource, Tracked, TrackFrames, replay_rules
from strata.tools.bench.rules_retrack import on_pts_clock, pts_clock, pts_origin, retrack

SESSION = 1


@dataclass(frozen=True, slots=True)
class Scene:
    """What every policy is replayed on: the detector's boxes on every frame, their
    capture times, the rules, the tracker, and the reference's rule results."""

    boxes: list[FrameBoxes]
    capture_ns: list[int]
    source: FrameSource
    rules: RulesConfig
    tracking: TrackingConfig
    reference: list[RuleHit]
    fps: float
    tolerance_s: float = 1.0
    # The reference's published frames (its track ids): for `ideal_identities`.
    reference_frames: list[Tracked] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.boxes)

    def frame_of(self, time_s: float) -> int:
        """The frame index at `time_s` into the clip."""
        return min(max(round(time_s * self.fps), 0), len(self) - 1)


def load_scene(
    folder: Path,
    camera_rules: dict[str, Any],
    tracking: TrackingConfig | None = None,
    tolerance_s: float = 1.0,
) -> Scene:
    """The reference of a saved `strata bench rules` run (`--out` folder), on the clip's
    clock: its detections tracked again with `tracking` (default: the tracker's defaults
    as they are now; the reference is the edge's tracker on every frame, so a tracker
    change changes it too), its rule results from the engine as it is now."""
    from strata.tools.bench.rules import (
        Clock,
        Collected,
        _capture_times,
        rule_hits,
        rules_config,
    )
    from strata.tools.bench.rules_frames import track_frames

    got = Collected.load(folder)
    fps = got.fps or 10.0
    rules = rules_config(camera_rules)
    base = tracking or TrackingConfig()
    ref = on_pts_clock(got.reference, fps)
    total = max((f.index for f in ref), default=-1) + 1
    ref = retrack(ref, total, got.frame_size, base, pts_clock(total, fps, pts_origin(ref, fps)))
    source = FrameSource("bench", got.frame_size, got.labels)
    ref_events = replay_rules(track_frames(ref, source, base), rules)
    by_index = {f.index: FrameBoxes.of(f.boxes, f.class_ids, f.scores) for f in ref}
    return Scene(
        boxes=[by_index.get(i, FrameBoxes.empty()) for i in range(total)],
        capture_ns=_capture_times(ref, total, fps),
        source=source,
        rules=rules,
        tracking=base.model_copy(update={"answer": "interpolate"}),
        reference=rule_hits(ref_events, Clock.of(ref, fps)),
        fps=fps,
        tolerance_s=tolerance_s,
        reference_frames=ref,
    )


class Policy(Protocol):
    """Which frames the device keeps, told what the edge's rules say after each one."""

    def keep(self, index: int) -> bool:
        """Source frame `index` goes to the edge."""
        ...

    def detected(self, index: int, need: Need) -> None:
        """Frame `index` was detected and the rules ran up to it: `need` says whether the
        next frames decide a rule (the engine's needs_frames over the gap just used)."""
        ...


@dataclass
class Outcome:
    """One policy's run: the frames kept, the events, and their agreement."""

    name: str
    kept: np.ndarray
    events: list[events_pb2.TrackEvent]
    hits: list[RuleHit]
    agreement: RulesAgreement
    asks: int = 0

    @property
    def share(self) -> float:
        return float(self.kept.mean()) if self.kept.size else 0.0

    @property
    def observed_share(self) -> float:
        return sum(h.observed for h in self.hits) / len(self.hits) if self.hits else 0.0

    def row(self) -> dict[str, Any]:
        """The figures of one policy (the tool's JSON)."""
        a = self.agreement
        return {
            "policy": self.name,
            "share": round(self.share, 4),
            "count_agreement": round(a.count_agreement, 4),
            "f1": round(a.f1, 4),
            "observed_share": round(self.observed_share, 4),
            "asks": self.asks,
        }


def _tracked(index: int, capture_ns: int, t: TrackedBoxes) -> Tracked:
    return Tracked(
        index,
        capture_ns,
        t.boxes.astype(np.float64),
        t.scores.astype(np.float64),
        t.class_ids.astype(np.int64),
        t.track_ids.astype(np.uint64),
        not t.predicted,
    )


def simulate(scene: Scene, policy: Policy, name: str = "") -> Outcome:
    """The clip through `policy`'s kept frames, the edge's tracker and the rules, causally."""
    from strata.tools.bench.rules import Clock, rule_hits

    answers = Answers(scene.tracking.model_copy(update={"hold_s": 1e9}))
    build = TrackFrames(scene.source, scene.tracking)
    engine = RulesEngine(scene.rules, "bench-policy", wall_ns=lambda: scene.capture_ns[0])
    cam = scene.source.camera_id
    w, h = scene.source.frame_size
    kept = np.zeros(len(scene), bool)
    events: list[events_pb2.TrackEvent] = []
    published: list[Tracked] = []
    last_kept = -1

    def run(index: int, t: TrackedBoxes) -> None:
        tr = _tracked(index, scene.capture_ns[index], t)
        published.append(tr)
        events.extend(engine.process(build(tr)))

    for i, dets in enumerate(scene.boxes):
        header = frame_pb2.FrameHeader(
            camera_id=cam, session_id=SESSION, frame_index=i, width=w, height=h
        )
        if policy.keep(i):
            kept[i] = True
            answers.expect(header)
            tracked, done = answers.detected(header, dets)
            for a in done:
                if a.header.frame_index < i:
                    run(a.header.frame_index, a.boxes)
            run(i, tracked)
            for a in done:
                if a.header.frame_index > i:
                    run(a.header.frame_index, a.boxes)
            need = Need()
            if last_kept >= 0:
                gap_s = (scene.capture_ns[i] - scene.capture_ns[last_kept]) / 1e9
                need = engine.needs_frames(cam, gap_s)
            last_kept = i
            policy.detected(i, need)
        else:
            answers.skipped(header, 0.0, 0)
            for a in answers.ready(now=0.0):
                run(a.header.frame_index, a.boxes)
    for a in answers.ready(now=1e12):
        run(a.header.frame_index, a.boxes)
    hits = rule_hits(events, Clock.of(published, scene.fps))
    return Outcome(
        name,
        kept,
        events,
        hits,
        compare(hits, scene.reference, scene.tolerance_s),
        getattr(policy, "asks", 0),
    )


# ---- policies ----------------------------------------------------------------------------


@dataclass
class Fixed:
    """Keep the frames of a mask chosen beforehand (uniform, a daemon run's, hindsight)."""

    mask: np.ndarray

    def keep(self, index: int) -> bool:
        return bool(self.mask[index]) if index < self.mask.size else False

    def detected(self, index: int, need: Need) -> None:
        pass


@dataclass(frozen=True, slots=True)
class AskSettings:
    """How a policy answers the rules' asks: the ask lands `latency` frames after the
    detected frame that raised it (the ack path), keeps `frames` frames in a row from there;
    a token bucket of `budget` asks per source frame (at most `burst` saved) bounds them;
    `reasons`: which of the rules' reasons ("line", "zone", "dwell") are asked for."""

    latency: int = 1
    frames: int = 1
    budget: float = 1.0
    burst: float = 3.0
    reasons: tuple[str, ...] = ("line", "zone", "dwell")


@dataclass
class Spaced:
    """The cascade with motion everywhere: a frame once `gap` frames have passed since
    the last kept one; with `ask`, also the frames the rules ask for."""

    gap: int
    ask: AskSettings | None = None
    asks: int = 0
    _last: int = -(10**9)
    _asked: set[int] = field(default_factory=set)
    _tokens: float = 0.0

    def keep(self, index: int) -> bool:
        if self.ask is not None:
            self._tokens = min(self.ask.burst, self._tokens + self.ask.budget)
        if index in self._asked or index - self._last >= self.gap:
            self._asked.discard(index)
            self._last = index
            return True
        return False

    def detected(self, index: int, need: Need) -> None:
        a = self.ask
        if a is None or not any(getattr(need, r) for r in a.reasons) or self._tokens < 1.0:
            return
        self._tokens -= 1.0
        self.asks += 1
        start = index + max(a.latency, 1)
        self._asked.update(range(start, start + a.frames))


def hindsight(scene: Scene, share: float, before: int = 1, after: int = 1) -> np.ndarray:
    """The rule-aware oracle at `share` (no device can): the frames round every reference
    rule result (`before` and `after` it), the rest of the budget spread uniformly."""
    n = len(scene)
    around = np.zeros(n, bool)
    for h in scene.reference:
        f = scene.frame_of(h.time_s)
        around[max(f - before, 0) : min(f + after + 1, n)] = True
    left = max(0.0, share - float(around.mean()))
    out: np.ndarray = around | uniform(n, left)
    return out


# ---- perfect identities ---------------------------------------------------------------


def ideal_identities(frames: Sequence[Tracked], mask: np.ndarray) -> list[Tracked]:
    """The reference's own tracks (every frame's ids) seen only at the frames of `mask`,
    the frames between answered as the edge interpolates (a track in both looks moves
    linearly; one in a single look shows for the half of the gap nearest it): what a
    tracker that never loses or swaps an id would give at that share."""
    by_index = {f.index: f for f in frames}
    kept = np.flatnonzero(mask)
    out = []
    for f in sorted(frames, key=lambda f: f.index):
        j = int(np.searchsorted(kept, f.index))
        if mask[f.index] or j == 0 or j >= kept.size:
            out.append(f if mask[f.index] else _nothing(f))
            continue
        a, b = by_index.get(int(kept[j - 1])), by_index.get(int(kept[j]))
        if a is None or b is None:
            out.append(_nothing(f))
            continue
        out.append(_between(f, a, b))
    return out


def _nothing(f: Tracked) -> Tracked:
    return Tracked(
        f.index,
        f.capture_ns,
        np.zeros((0, 4)),
        np.zeros(0),
        np.zeros(0, np.int64),
        np.zeros(0, np.uint64),
        False,
    )


def _between(f: Tracked, a: Tracked, b: Tracked) -> Tracked:
    """Frame `f` between looks `a` and `b`, by track id."""
    w = (f.index - a.index) / max(b.index - a.index, 1)
    ia, ib = a.track_ids, b.track_ids
    both_a = np.isin(ia, ib) & (ia != 0)
    order = np.argsort(ib)
    at_b = order[np.searchsorted(ib, ia[both_a], sorter=order)]
    moved = a.boxes[both_a] * (1 - w) + b.boxes[at_b] * w
    # A track in one look only: shown for the half of the gap nearest that look.
    only = (~np.isin(ia, ib) & (ia != 0)) if w < 0.5 else np.zeros(ia.size, bool)
    late = (~np.isin(ib, ia) & (ib != 0)) if w >= 0.5 else np.zeros(ib.size, bool)
    return Tracked(
        f.index,
        f.capture_ns,
        np.concatenate([moved, a.boxes[only], b.boxes[late]]),
        np.concatenate([a.scores[both_a], a.scores[only], b.scores[late]]),
        np.concatenate([a.class_ids[both_a], a.class_ids[only], b.class_ids[late]]),
        np.concatenate([ia[both_a], ia[only], ib[late]]),
        False,
    )


# ---- the tool ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One policy's figures, over the phases it was run at (mean, and the spread)."""

    policy: str
    share: float
    count_agreement: float
    f1: float
    count_range: tuple[float, float]
    f1_range: tuple[float, float]
    observed_share: float
    asks: float

    @classmethod
    def of(cls, name: str, runs: Sequence[Outcome]) -> Row:
        c = [o.agreement.count_agreement for o in runs]
        f = [o.agreement.f1 for o in runs]
        return cls(
            name,
            float(np.mean([o.share for o in runs])),
            float(np.mean(c)),
            float(np.mean(f)),
            (min(c), max(c)),
            (min(f), max(f)),
            float(np.mean([o.observed_share for o in runs])),
            float(np.mean([o.asks for o in runs])),
        )

    def doc(self) -> dict[str, Any]:
        """JSON-able, rounded."""
        return {
            "policy": self.policy,
            "share": round(self.share, 4),
            "count_agreement": round(self.count_agreement, 4),
            "f1": round(self.f1, 4),
            "count_range": [round(v, 4) for v in self.count_range],
            "f1_range": [round(v, 4) for v in self.f1_range],
            "observed_share": round(self.observed_share, 4),
            "asks": round(self.asks, 1),
        }


def _ideal(scene: Scene, mask: np.ndarray, name: str) -> Outcome:
    from strata.tools.bench.rules import Clock, rule_hits
    from strata.tools.bench.rules_frames import track_frames

    frames = ideal_identities(scene.reference_frames, mask)
    events = replay_rules(track_frames(frames, scene.source, scene.tracking), scene.rules)
    hits = rule_hits(events, Clock.of(frames, scene.fps))
    return Outcome(name, mask, events, hits, compare(hits, scene.reference, scene.tolerance_s))


def spaced(gap: int, phase: int, ask: AskSettings | None = None) -> Spaced:
    """A `Spaced` policy whose first kept frame is `phase`."""
    p = Spaced(gap, ask)
    p._last = phase - gap
    return p


def compare_policies(scene: Scene, share: float, phases: int) -> list[Row]:
    """Every policy at `share` (phases: its kept frames shifted by 0 .. phases - 1)."""
    n = len(scene)
    base = uniform(n, share)
    shifts = range(max(phases, 1))
    rows = [
        Row.of(f"uniform {share:.2f}", [simulate(scene, Fixed(np.roll(base, k))) for k in shifts]),
        Row.of(
            "perfect identities (the reference's ids, positions interpolated between kept frames)",
            [_ideal(scene, np.roll(base, k), "") for k in shifts],
        ),
        Row.of(
            "hindsight (the frame of every reference rule result, the rest uniform)",
            [simulate(scene, Fixed(hindsight(scene, share, 0, 0)))],
        ),
    ]
    # The rules' asks on top of a longer spacing, their budget the rest of the share.
    gap = round(1 / share) + 1 if share > 0 else n
    budget = max(share - 1 / gap, 0.0)
    for latency in (1, 2):
        ask = AskSettings(latency=latency, budget=budget)
        rows.append(
            Row.of(
                f"1 in {gap} + rule asks (budget {budget:.3f}, latency {latency})",
                [simulate(scene, spaced(gap, k % gap, ask)) for k in shifts],
            )
        )
    return rows


def markdown(rows: Sequence[Row]) -> str:
    """The rows as a table."""
    lines = [
        "| policy | share | count agreement (range) | F1 (range) | observed | asks |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.policy} | {r.share:.3f} | {r.count_agreement:.3f} ({r.count_range[0]:.3f}-"
            f"{r.count_range[1]:.3f}) | {r.f1:.3f} ({r.f1_range[0]:.3f}-{r.f1_range[1]:.3f}) | "
            f"{r.observed_share:.3f} | {r.asks:.0f} |"
        )
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench rules-policy`'s options."""
    p.add_argument(
        "--from",
        dest="from_dir",
        required=True,
        metavar="DIR",
        help="a `strata bench rules` run's --out folder (its reference.npz)",
    )
    p.add_argument("--share", type=float, default=0.2, help="frames to the edge (0.2)")
    p.add_argument("--phases", type=int, default=5, help="shifts of each spacing tried (5)")
    p.add_argument(
        "--tolerance", type=float, default=1.0, metavar="S", help="event match window (1 s)"
    )
    p.add_argument(
        "--tracking",
        metavar="YAML",
        help="edge.tracking settings (inline YAML) for the reference and every policy; the "
        "reference is tracked again with them",
    )
    p.add_argument("--json", metavar="OUT", help="write the rows here too")


def run(args: argparse.Namespace) -> int:
    """The rows as a markdown table on stdout (and JSON with --json)."""
    import yaml
    from strata.shared.config import validate_model
    from strata.tools.bench.rules import VTEST_RULES

    tracking = None
    if args.tracking:
        tracking = validate_model(TrackingConfig, yaml.safe_load(args.tracking) or {})
    scene = load_scene(Path(args.from_dir), VTEST_RULES, tracking, args.tolerance)
    rows = compare_policies(scene, args.share, args.phases)
    print(markdown(rows), end="")
    if args.json:
        Path(args.json).write_text(json.dumps([r.doc() for r in rows], indent=2) + "\n")
    return 0
