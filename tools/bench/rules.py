"""The rules on tracks against the detector on every frame: `strata bench rules`.

One run, three ways to the same rules (RULES below) on one clip (vtest.mp4; its first 40
frames with `--quick`):

- **reference**: the cascade bench's reference run (tools/bench/cascade.py: the device's
  gates off, full-resolution raw frames, so the edge's detector and tracker see every
  original frame) of the real daemons over loopback, paced as the cascade bench paces its
  reference (the file read as fast as the edge takes it, no degradation: no frame dropped),
  and scored on the source's clock (frame index over the clip's fps,
  rules_retrack.pts_clock), not the wall clock the device stamped: a reference run on a
  loaded machine dropped 23 of 795 frames and its capture clock stalled up to 1.8 s, so
  two runs of the same code disagreed; its events are then replayed offline;
- **cascade**: the cascade as shipped (the cascade bench's second run), same rules;
- **uniform**: the reference's detections kept at uniform spacing, at the cascade's share
  of frames, replayed offline through the edge's own answering code (the same tracker,
  dropped frames answered by prediction or interpolation as the edge does:
  edge/tracking/calibration.py `replay`), then the same RulesEngine.

The two daemon runs' events are what the edge published: the copy of every TrackEvent on
its PUB socket (the events topic, tools/bench/rules_frames.py `EventTap`). An edge
without a rules stage publishes none; then its published tracked boxes are replayed
offline through the RulesEngine (`rules_frames.replay_rules`), and the report says so
(`runs.*.source`: "edge" or "replay").

Rules on vtest (768x576, 10 fps; people walk mostly left and right on the path):
- lines `west` and `east`: vertical, across the path at x = 0.33 and 0.66, drawn top to
  bottom, `in_side: left` (looking down the image, its left is rightwards): `in` = walking
  right, `out` = walking left;
- zone `far_path`: the far part of the path, below the parking bays (y 0.33 to 0.47);
- zone `plaza`: the open paved area right of the lamp post, where people stop and turn;
- dwell `linger`: 3 s in `plaza`;
- stationary: the defaults.

Reported (JSON on stdout and in `--out`/rules.json, a markdown table in `--out`/rules.md):
per line and direction the crossings, per zone the entries, per dwell rule the dwell
events, of each run; each run's agreement with the reference (rules_agreement.py: count
agreement 1 - |count - ref| / max(ref, 1) per key and summed over keys, and matched-event
F1 with `--tolerance` seconds); the share of frames the cascade sent to the edge (target:
agreement >= 0.95 with at most 20% of frames); the share of rule results observed (both
ends of a crossing detected) rather than predicted; events per minute by type; tracks
against end events and updates (no flood); the rule cost per track per frame (RulesEngine
over the reference's frames, and over synthetic scenes of 1, 5, 20 and 50 tracks).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.events import END, NEW, UPDATE, type_name
from strata.edge.rules.frame import TrackFrame
from strata.edge.tracking.calibration import replay, uniform
from strata.shared import machine
from strata.shared.config import validate_model
from strata.shared.config.base import merge
from strata.shared.config.edge import TrackingConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import events_pb2
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.bench.cascade import (
    GATES_OFF,
    NO_SHEDDING,
    Labels,
    cascade_config,
    clip_fps,
    clip_shape,
    reference_overrides,
)
from strata.tools.bench.clip_args import add_encoding_argument
from strata.tools.bench.progress import say
from strata.tools.bench.rules_agreement import RuleHit, RulesAgreement, compare, rule_hit
from strata.tools.bench.rules_frames import (
    EventTap,
    FrameSource,
    Tracked,
    load_run,
    published,
    replay_rules,
    replayed,
    save_run,
    track_frames,
)
from strata.tools.bench.rules_retrack import on_pts_clock, pts_clock, pts_origin, retrack
from strata.tools.clips import find_vtest
from strata.tools.demo.pipeline import Outcome, PipelineRun, RunOptions
from strata.tools.demo.results import Received
from strata.tools.demo.stack import Camera

log = logging.getLogger(__name__)

CAMERA = "bench"


def _vline(name: str, x: float) -> dict[str, Any]:
    # Drawn downwards, so the side called "left" is the image's right: `in` = rightwards.
    return {"name": name, "points": [[x, 0.3], [x, 0.95]], "in_side": "left", "labels": ["person"]}


# vtest's rules (relative coordinates; the module docstring says what each is for).
VTEST_RULES: dict[str, Any] = {
    "lines": [_vline("west", 0.33), _vline("east", 0.66)],
    "zones": [
        {
            "name": "far_path",
            "points": [[0.0, 0.33], [0.75, 0.33], [0.75, 0.47], [0.0, 0.47]],
            "labels": ["person"],
            "enter_frames": 2,
            "leave_frames": 2,
        },
        {
            "name": "plaza",
            "points": [[0.56, 0.45], [1.0, 0.45], [1.0, 0.85], [0.56, 0.75]],
            "labels": ["person"],
            "enter_frames": 2,
            "leave_frames": 2,
        },
    ],
    "dwell": [{"name": "linger", "zone": "plaza", "seconds": 3.0}],
}
# The synthetic clip (--quick): coloured shapes, whatever the detector calls them.
SYNTHETIC_RULES: dict[str, Any] = {
    "lines": [
        {k: v for k, v in _vline(n, x).items() if k != "labels"}
        for n, x in (("west", 0.33), ("east", 0.66))
    ],
    "zones": [{"name": "middle", "points": [[0.2, 0.2], [0.8, 0.2], [0.8, 0.8], [0.2, 0.8]]}],
    "dwell": [{"name": "linger", "zone": "middle", "seconds": 1.0}],
}
QUICK_FRAMES = 40
TARGET_AGREEMENT = 0.95
TARGET_SHARE = 0.20
COST_TRACKS = (1, 5, 20, 50)


def rules_config(camera_rules: dict[str, Any]) -> RulesConfig:
    """The `rules:` section with `camera_rules` for the bench's camera."""
    return validate_model(RulesConfig, {"cameras": {CAMERA: camera_rules}})


# ---- the daemon runs ---------------------------------------------------------------------


@dataclass
class DaemonRun:
    """One pipeline run and the track events its edge published."""

    outcome: Outcome
    events: list[events_pb2.TrackEvent]

    @property
    def results(self) -> dict[tuple[str, int], Received]:
        """The bench camera's published frames (whatever else the socket carried left out)."""
        return {k: r for k, r in self.outcome.results.items() if k[0] == CAMERA}


def run_pipeline(
    workdir: Path, clip: Path, overrides: dict[str, Any], timeout_s: float
) -> DaemonRun:
    """One pipeline run over `clip`, the edge's event copies tapped; raises when a daemon died."""
    run = PipelineRun(
        workdir,
        [Camera(CAMERA, str(clip))],
        overrides,
        RunOptions(quiet_s=1.5, drain_timeout_s=timeout_s, startup_timeout_s=120.0),
    )
    tap = EventTap(run.stack.publish_address)
    try:
        outcome = run.execute()
    finally:
        # The run ended once every counter stood still `quiet_s`: the events are in.
        tap.close()
    if outcome.error is not None:
        raise RuntimeError(str(outcome.error))
    if tap.malformed:
        outcome.notes.append(f"{tap.malformed} messages on the events topic did not parse")
    return DaemonRun(outcome, [e for e in tap.events() if e.camera_id == CAMERA])


# ---- one run's rule results --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Clock:
    """Clip time of a capture time: the frame index it was captured at, over the clip's fps
    (each run has its own capture times; frame indices are common to all)."""

    index_of: dict[int, int]
    first_ns: int
    fps: float

    @classmethod
    def of(cls, frames: Sequence[Tracked], fps: float) -> Clock:
        index = {f.capture_ns: f.index for f in frames if f.capture_ns}
        return cls(index, min(index, default=0), fps)

    def seconds(self, capture_ns: int) -> float:
        i = self.index_of.get(capture_ns)
        if i is not None and self.fps > 0:
            return i / self.fps
        return (capture_ns - self.first_ns) / 1e9


@dataclass
class RunRules:
    """What one way of running produced, rule-wise."""

    name: str
    source: str  # "edge" (its PUB copy) or "replay" (offline through RulesEngine)
    events: list[events_pb2.TrackEvent]
    hits: list[RuleHit]
    frames_detected: int


def rule_hits(events: Sequence[events_pb2.TrackEvent], clock: Clock) -> list[RuleHit]:
    """The rule results among `events`."""
    out = []
    for e in events:
        hit = rule_hit(e, clock.seconds(e.capture_ns))
        if hit is not None:
            out.append(hit)
    return out


def summary(run: RunRules, total: int, fps: float) -> dict[str, Any]:
    """A run's counts, observed share, events per minute and lifecycle (the report's)."""
    minutes = total / fps / 60 if fps > 0 else 0.0
    types = Counter(type_name(e.type) for e in run.events)
    uids = {e.track_uid for e in run.events if e.type == NEW}
    ends = [e.track_uid for e in run.events if e.type == END]
    counts = Counter(str(h.key) for h in run.hits)
    observed = sum(h.observed for h in run.hits)
    return {
        "source": run.source,
        "frames_detected": run.frames_detected,
        "share_to_edge": run.frames_detected / total if total else 0.0,
        "counts": dict(sorted(counts.items())),
        "rule_results": len(run.hits),
        "observed_share": observed / len(run.hits) if run.hits else None,
        "events": len(run.events),
        "events_per_minute": {t: n / minutes for t, n in sorted(types.items())} if minutes else {},
        # No flood: one end per track (tracks still open when the clip ends have none
        # yet), updates only on change.
        "tracks": len(uids),
        "end_events": len(ends),
        "duplicate_ends": len(ends) - len(set(ends)),
        "updates": types.get(type_name(UPDATE), 0),
    }


def agreement_doc(a: RulesAgreement) -> dict[str, Any]:
    """A comparison as JSON."""
    return {
        "count_agreement": a.count_agreement,
        "worst_count_agreement": a.worst_count_agreement,
        "f1": a.f1,
        "tolerance_s": a.tolerance_s,
        "per_rule": {
            str(k.key): {
                "count": k.count,
                "reference": k.reference,
                "count_agreement": k.count_agreement,
                "matched": k.matched,
                "f1": k.f1,
            }
            for k in a.keys
        },
    }


# ---- rule cost ---------------------------------------------------------------------------


def time_engine(frames: Sequence[TrackFrame], rules: RulesConfig) -> dict[str, float]:
    """RulesEngine.process over `frames` (the first one, which builds the camera, untimed):
    microseconds per track per frame and per frame."""
    if len(frames) < 2:
        return {"frames": 0, "track_frames": 0, "per_track_frame_us": 0.0, "per_frame_us": 0.0}
    eng = RulesEngine(rules, "bench", wall_ns=lambda: frames[0].capture_ns)
    eng.process(frames[0])
    t0 = time.perf_counter()
    for f in frames[1:]:
        eng.process(f)
    dt = time.perf_counter() - t0
    n = len(frames) - 1
    tracks = sum(len(f) for f in frames[1:])
    return {
        "frames": n,
        "track_frames": tracks,
        "per_track_frame_us": dt / max(tracks, 1) * 1e6,
        "per_frame_us": dt / n * 1e6,
    }


def synthetic_frames(tracks: int, frames: int, seed: int = 0) -> list[TrackFrame]:
    """`tracks` people walking at random on a 1000x1000 frame, a third predicted."""
    rng = np.random.default_rng(seed)
    pos, vel = rng.random((tracks, 2)) * 900 + 50, rng.normal(0, 5, (tracks, 2))
    ids = np.arange(1, tracks + 1, dtype=np.uint64)
    out = []
    for f in range(frames):
        pos = np.clip(pos + vel, 40, 960)
        boxes = np.concatenate([pos - np.array([20, 80]), pos + np.array([20, 0])], axis=1)
        out.append(
            TrackFrame(
                "cam",
                f * 100_000_000,
                (1000, 1000),
                ids,
                boxes,
                np.full(tracks, 0.8),
                np.zeros(tracks, np.int64),
                np.ones(tracks, bool),
                np.arange(tracks) % 3 != 0,
                ("person", "car"),
            )
        )
    return out


def synthetic_rules(lines: int = 4, zones: int = 4) -> RulesConfig:
    """4 horizontal lines, 4 tall zones and a dwell rule on camera `cam` (the cost scene)."""
    cam = {
        "lines": [
            {
                "name": f"l{i}",
                "points": [[0.05, (i + 1) / (lines + 1)], [0.95, (i + 1) / (lines + 1)]],
            }
            for i in range(lines)
        ],
        "zones": [
            {"name": f"z{i}", "points": [[x, 0.1], [x + 0.15, 0.1], [x + 0.15, 0.9], [x, 0.9]]}
            for i, x in enumerate(np.linspace(0.05, 0.8, zones).tolist())
        ],
        "dwell": [{"name": "d0", "zone": "z0", "seconds": 5}],
    }
    return validate_model(RulesConfig, {"cameras": {"cam": cam}})


def synthetic_cost(frames: int) -> list[dict[str, float]]:
    """The rule cost at each of COST_TRACKS tracks per camera."""
    rules = synthetic_rules()
    return [{"tracks": n, **time_engine(synthetic_frames(n, frames), rules)} for n in COST_TRACKS]


# ---- the whole measurement ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchSetup:
    """What one measurement runs on."""

    clip: Path
    workdir: Path
    camera_rules: dict[str, Any]
    tolerance_s: float = 1.0
    timeout_s: float = 1800.0
    cost_frames: int = 400
    # Set: both runs' saved detections tracked again with this (rules_retrack), not the
    # edge's published tracks (try a tracker setting offline; `--retrack`).
    retrack: TrackingConfig | None = None
    # What the cascade run's device sends the edge (jpeg: the device's default).
    encoding: str = "jpeg"
    # The cascade run's edge with appearance in its tracker (edge.appearance; `--appearance`);
    # the reference stays the every-frame run as shipped (motion only), so the agreement is
    # against the same reference as without it.
    appearance: bool = False


def events_of(
    published_events: list[events_pb2.TrackEvent],
    frames: Sequence[TrackFrame],
    rules: RulesConfig,
) -> tuple[str, list[events_pb2.TrackEvent]]:
    """The run's events from the edge's PUB copy when it sent any, else replayed offline."""
    if published_events:
        return "edge", published_events
    return "replay", replay_rules(frames, rules)


@dataclass(frozen=True, slots=True)
class Collected:
    """What the two daemon runs left: each one's published frames and the events its edge
    published (saved as reference.npz and cascade.npz in the work folder; `--from DIR`
    evaluates them again without the daemons)."""

    reference: list[Tracked]
    cascade: list[Tracked]
    reference_events: list[events_pb2.TrackEvent]
    cascade_events: list[events_pb2.TrackEvent]
    labels: tuple[str, ...]
    frame_size: tuple[int, int]
    fps: float = 0.0  # the clip's (0: unknown)
    notes: tuple[str, ...] = ()

    def save(self, folder: Path) -> None:
        """Into `folder` (frames and events per run, labels and frame size in meta.json)."""
        save_run(folder / "reference.npz", self.reference, self.reference_events)
        save_run(folder / "cascade.npz", self.cascade, self.cascade_events)
        meta = {
            "labels": list(self.labels),
            "frame_size": list(self.frame_size),
            "fps": self.fps,
            "notes": list(self.notes),
        }
        (folder / "collected.json").write_text(json.dumps(meta) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Collected:
        """What `save` wrote; FileNotFoundError names the missing file."""
        meta = json.loads((folder / "collected.json").read_text())
        ref, ref_events = load_run(folder / "reference.npz")
        cas, cas_events = load_run(folder / "cascade.npz")
        w, h = meta["frame_size"]
        labels = tuple(str(x) for x in meta["labels"])
        fps, notes = float(meta.get("fps", 0.0)), tuple(str(n) for n in meta.get("notes", []))
        return cls(ref, cas, ref_events, cas_events, labels, (int(w), int(h)), fps, notes)


def _appearance(on: bool) -> dict[str, Any]:
    """The cascade run's edge.appearance (`--appearance`: on for every camera)."""
    return {"edge": {"appearance": {"enabled": True}}} if on else {}


def collect(setup: BenchSetup, progress: Callable[[str], None] = say) -> Collected:
    """The reference and cascade daemon runs over the clip, with the same rules."""
    extra = merge(NO_SHEDDING, {"rules": {"cameras": {CAMERA: setup.camera_rules}}})
    progress(f"rules on {setup.clip.name}: reference run (every frame to the detector) ...")
    paced = merge(merge(extra, GATES_OFF), reference_overrides(*clip_shape(setup.clip)))
    ref = run_pipeline(setup.workdir / "reference", setup.clip, paced, setup.timeout_s)
    progress(f"rules on {setup.clip.name}: cascade run ...")
    cas = run_pipeline(
        setup.workdir / "cascade",
        setup.clip,
        merge(merge(cascade_config(setup.encoding), extra), _appearance(setup.appearance)),
        setup.timeout_s,
    )
    labels = Labels()
    ref_pub, cas_pub = published(ref.results, labels), published(cas.results, labels)
    return Collected(
        ref_pub,
        cas_pub,
        ref.events,
        cas.events,
        tuple(labels.ids),
        _frame_size(ref.results),
        clip_fps(setup.clip),
        (*ref.outcome.notes, *cas.outcome.notes),
    )


def measure(setup: BenchSetup, progress: Callable[[str], None] = say) -> dict[str, Any]:
    """Reference, cascade and uniform over one clip; the report's body."""
    got = collect(setup, progress)
    got.save(setup.workdir)
    return evaluate(got, setup, progress)


def evaluate(
    got: Collected, setup: BenchSetup, progress: Callable[[str], None] = say
) -> dict[str, Any]:
    """The report's body from the daemon runs' frames and events."""
    rules = rules_config(setup.camera_rules)
    fps = got.fps or (clip_fps(setup.clip) if setup.clip.is_file() else 0.0) or 10.0
    base = setup.retrack or TrackingConfig()
    tracking = base.model_copy(update={"answer": "interpolate"})
    size = got.frame_size
    total = max((f.index for f in got.reference), default=-1) + 1
    ref_pub = on_pts_clock(got.reference, fps)
    # The edge's own events only where they were stamped on the source's clock already.
    on_clock = [f.capture_ns for f in ref_pub] == [f.capture_ns for f in got.reference]
    ref_events_in = got.reference_events if on_clock else []
    cas_pub, cas_events_in = got.cascade, got.cascade_events
    if setup.retrack is not None:
        origin = pts_origin(ref_pub, fps)
        ref_pub = retrack(ref_pub, total, size, base, pts_clock(total, fps, origin))
        cas_ns = _capture_times(cas_pub, total, fps)
        cas_pub = retrack(cas_pub, total, size, tracking, cas_ns)
        ref_events_in, cas_events_in = [], []
    source = FrameSource(CAMERA, size, got.labels)
    ref_frames = track_frames(ref_pub, source, base)
    cas_frames = track_frames(cas_pub, source, tracking)
    ref_clock, cas_clock = Clock.of(ref_pub, fps), Clock.of(cas_pub, fps)
    ref_src, ref_events = events_of(ref_events_in, ref_frames, rules)
    cas_src, cas_events = events_of(cas_events_in, cas_frames, rules)
    detected = sum(f.detected for f in cas_pub)
    share = detected / total if total else 0.0
    progress(f"uniform sampling at {share:.1%} of frames, replayed through the same tracker ...")
    kept = uniform(total, share)
    uni = _uniform_of(ref_pub, total, fps, source, rules, tracking)
    uni_events = uni.events(kept)
    runs = {
        "reference": RunRules(
            "reference", ref_src, ref_events, rule_hits(ref_events, ref_clock), total
        ),
        "cascade": RunRules(
            "cascade", cas_src, cas_events, rule_hits(cas_events, cas_clock), detected
        ),
        "uniform": RunRules(
            "uniform", "replay", uni_events, rule_hits(uni_events, ref_clock), int(kept.sum())
        ),
    }
    ref_hits = runs["reference"].hits
    # The reference's own replay: identical to its events when they came from the replay,
    # and a check of the edge's rules stage against the offline engine when they did not;
    # the same for the cascade (the engine as it is now over the cascade's tracks).
    replay_hits = rule_hits(replay_rules(ref_frames, rules), ref_clock)
    cas_replay_hits = rule_hits(replay_rules(cas_frames, rules), cas_clock)
    progress("rule cost: RulesEngine over the reference's frames and synthetic scenes ...")
    agreements = {
        "reference_self": compare(ref_hits, ref_hits, setup.tolerance_s),
        "reference_replay": compare(replay_hits, ref_hits, setup.tolerance_s),
        "cascade": compare(runs["cascade"].hits, ref_hits, setup.tolerance_s),
        "cascade_replay": compare(cas_replay_hits, ref_hits, setup.tolerance_s),
        "uniform": compare(runs["uniform"].hits, ref_hits, setup.tolerance_s),
    }
    progress("uniform sampling at the other phases of its spacing ...")
    phases = uni.phases(
        kept, lambda ev: compare(rule_hits(ev, ref_clock), ref_hits, setup.tolerance_s)
    )
    cas_a = agreements["cascade"]
    return {
        "clip": setup.clip.name,
        "frames_total": total,
        "fps": fps,
        "frame_size": list(size),
        "camera_rules": setup.camera_rules,
        "runs": {name: summary(r, total, fps) for name, r in runs.items()},
        "agreement": {name: agreement_doc(a) for name, a in agreements.items()},
        "uniform_phases": phases,
        "targets": _targets(cas_a.count_agreement, cas_a.f1, share),
        "cost": {
            "reference_frames": time_engine(ref_frames, rules),
            "synthetic": synthetic_cost(setup.cost_frames),
        },
        "notes": list(got.notes),
    }


def _targets(count_agreement: float, f1: float, share: float) -> dict[str, Any]:
    met = min(count_agreement, f1) >= TARGET_AGREEMENT and share <= TARGET_SHARE
    return {"agreement": TARGET_AGREEMENT, "share_to_edge": TARGET_SHARE, "met": met}


def _uniform_of(
    ref_pub: Sequence[Tracked],
    total: int,
    fps: float,
    source: FrameSource,
    rules: RulesConfig,
    tracking: TrackingConfig,
) -> Uniform:
    """The reference's detections, ready to be kept at uniform spacing and replayed."""
    ref_boxes = {f.index: FrameBoxes.of(f.boxes, f.class_ids, f.scores) for f in ref_pub}
    boxes = [ref_boxes.get(i, FrameBoxes.empty()) for i in range(total)]
    return Uniform(boxes, _capture_times(ref_pub, total, fps), source, rules, tracking)


@dataclass(frozen=True, slots=True)
class Uniform:
    """The reference's detections kept at uniform spacing, the rest answered as the edge
    answers skipped frames (the same tracker), then the same rules."""

    reference: list[FrameBoxes]
    capture_ns: list[int]
    source: FrameSource
    rules: RulesConfig
    tracking: TrackingConfig

    def events(self, kept: np.ndarray) -> list[events_pb2.TrackEvent]:
        """The track events of keeping the frames where `kept`."""
        answers = replay(self.reference, kept, self.tracking, *self.source.frame_size)
        frames = track_frames(replayed(answers, self.capture_ns), self.source, self.tracking)
        return replay_rules(frames, self.rules)

    def phases(
        self, kept: np.ndarray, score: Callable[[list[events_pb2.TrackEvent]], RulesAgreement]
    ) -> list[dict[str, Any]]:
        """`kept` shifted by 1, 2, ... frames up to its spacing, each scored: how far the
        measure moves when nothing changes but which frames were kept."""
        share = float(kept.mean()) if kept.size else 0.0
        out = []
        for k in range(1, _spacing(share)):
            a = score(self.events(np.roll(kept, k)))
            out.append({"shift": k, "count_agreement": a.count_agreement, "f1": a.f1})
        return out


def _spacing(share: float) -> int:
    """Frames between two kept ones at `share`, rounded (1: every frame)."""
    return max(1, round(1 / share)) if share > 0 else 1


def _frame_size(results: Mapping[tuple[str, int], Received]) -> tuple[int, int]:
    for r in results.values():
        if r.message.width and r.message.height:
            return int(r.message.width), int(r.message.height)
    return 0, 0


def _tracking(text: str) -> TrackingConfig:
    """`--retrack`'s inline YAML as the tracking section."""
    import yaml

    return validate_model(TrackingConfig, yaml.safe_load(text) or {})


def _capture_times(frames: Sequence[Tracked], total: int, fps: float) -> list[int]:
    """Capture time of every frame index (the reference's; a missing one from the clip's
    frame rate, so replayed frames stay in order)."""
    known = {f.index: f.capture_ns for f in frames if f.capture_ns}
    first = min(known.values(), default=0)
    step = int(1e9 / fps) if fps > 0 else 100_000_000
    return [known.get(i, first + i * step) for i in range(total)]


# ---- report --------------------------------------------------------------------------------


def headline(body: dict[str, Any]) -> dict[str, Any]:
    """The flat `rules.*` keys (the coordinator's table in docs/benchmarks.md)."""
    a, runs = body["agreement"], body["runs"]
    cost = {c["tracks"]: c for c in body["cost"]["synthetic"]}
    return {
        "rules.share_to_edge": runs["cascade"]["share_to_edge"],
        "rules.count_agreement": a["cascade"]["count_agreement"],
        "rules.f1": a["cascade"]["f1"],
        "rules.uniform_count_agreement": a["uniform"]["count_agreement"],
        "rules.uniform_f1": a["uniform"]["f1"],
        "rules.reference_self_agreement": min(
            a["reference_self"]["count_agreement"], a["reference_self"]["f1"]
        ),
        "rules.observed_share": runs["cascade"]["observed_share"],
        "rules.cost_per_track_frame_us": body["cost"]["reference_frames"]["per_track_frame_us"],
        **{
            f"rules.cost_{n}_tracks_per_track_frame_us": cost[n]["per_track_frame_us"]
            for n in COST_TRACKS
            if n in cost
        },
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _phases(doc: dict[str, Any]) -> str:
    """The spread of uniform over the phases of its spacing, as a sentence ("" if none)."""
    phases = doc.get("uniform_phases") or []
    if not phases:
        return ""
    count = [p["count_agreement"] for p in phases]
    f1 = [p["f1"] for p in phases]
    return (
        f" Uniform with its kept frames shifted by 1 to {len(phases)} frames: count "
        f"{min(count):.3f} to {max(count):.3f}, F1 {min(f1):.3f} to {max(f1):.3f} (the "
        "measure's spread when only which frames were kept changes)."
    )


def markdown(doc: dict[str, Any]) -> str:
    """rules.md: per rule, then the summary figures."""
    runs, a = doc["runs"], doc["agreement"]
    m = doc["machine"]
    lines = [
        f"# `{doc['command']}` on {doc['clip']} ({doc['frames_total']} frames)",
        "",
        f"Machine: {machine.one_line(m)}; load average {m['load_avg_1m_at_start']:.2f} at "
        f"start, {m['load_avg_1m_at_end']:.2f} at end. Events: reference from "
        f"{runs['reference']['source']}, cascade from {runs['cascade']['source']}, uniform "
        f"replayed. Agreement: count 1 - |n - ref| / max(ref, 1); F1 of events matched within "
        f"{a['cascade']['tolerance_s']:g} s.",
        "",
        "| rule | reference | cascade (count agr., F1) | uniform (count agr., F1) |",
        "| --- | --- | --- | --- |",
    ]
    for key, ref in a["reference_self"]["per_rule"].items():
        row = [f"| {key} | {ref['reference']}"]
        for run in ("cascade", "uniform"):
            r = a[run]["per_rule"].get(key)
            row.append(f"{r['count']} ({r['count_agreement']:.2f}, {r['f1']:.2f})" if r else "0")
        lines.append(" | ".join(row) + " |")
    extra = sorted(
        (set(a["cascade"]["per_rule"]) | set(a["uniform"]["per_rule"]))
        - set(a["reference_self"]["per_rule"])
    )
    for key in extra:
        cells = [str(a[r]["per_rule"].get(key, {}).get("count", 0)) for r in ("cascade", "uniform")]
        lines.append(f"| {key} | 0 | {cells[0]} | {cells[1]} |")
    lines += ["", "| figure | reference | cascade | uniform |", "| --- | --- | --- | --- |"]
    names = ("reference", "cascade", "uniform")

    def figure(label: str, get: Callable[[str], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(get(n) for n in names) + " |")

    figure("share of frames to the edge (target <= 0.20)", lambda n: _pct(runs[n]["share_to_edge"]))
    figure(
        "count agreement, all rules (target >= 0.95)",
        lambda n: _pct(a["reference_self" if n == "reference" else n]["count_agreement"]),
    )
    figure(
        "matched-event F1 (target >= 0.95)",
        lambda n: _pct(a["reference_self" if n == "reference" else n]["f1"]),
    )
    figure("rule results observed (not predicted)", lambda n: _pct(runs[n]["observed_share"]))
    figure(
        "tracks / end events / duplicate ends",
        lambda n: "{tracks} / {end_events} / {duplicate_ends}".format(**runs[n]),
    )
    figure("updates", lambda n: str(runs[n]["updates"]))
    types = sorted({t for n in names for t in runs[n]["events_per_minute"]})

    def per_minute(kind: str) -> Callable[[str], str]:
        return lambda n: f"{runs[n]['events_per_minute'].get(kind, 0):.1f}"

    for t in types:
        figure(f"{t} events per minute", per_minute(t))
    c, replay, cas_replay = doc["cost"], a["reference_replay"], a["cascade_replay"]
    lines += [
        "",
        "The reference's tracks replayed offline through RulesEngine, against its events: "
        f"count {_pct(replay['count_agreement'])}, F1 {_pct(replay['f1'])}. The cascade's "
        "tracks replayed the same way, against the reference: count "
        f"{_pct(cas_replay['count_agreement'])}, F1 {_pct(cas_replay['f1'])}.{_phases(doc)}",
        "",
        "| rule cost (RulesEngine.process) | per track per frame | per frame |",
        "| --- | --- | --- |",
        f"| the reference's frames ({c['reference_frames']['track_frames']} track-frames) | "
        f"{c['reference_frames']['per_track_frame_us']:.1f} us | "
        f"{c['reference_frames']['per_frame_us']:.1f} us |",
    ]
    for s in c["synthetic"]:
        lines.append(
            f"| synthetic, {s['tracks']} tracks, 4 lines, 4 zones, 1 dwell | "
            f"{s['per_track_frame_us']:.1f} us | {s['per_frame_us']:.1f} us |"
        )
    return "\n".join(lines) + "\n"


# ---- the part ----------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench rules`'s options."""
    p.add_argument("--out", default="bench-out/rules", metavar="DIR", help="work folder")
    p.add_argument(
        "--quick",
        action="store_true",
        help="vtest's first 40 frames (the synthetic clip without it), short cost runs",
    )
    p.add_argument("--vtest", metavar="FILE", help="the real clip (default: data/vtest.mp4)")
    p.add_argument(
        "--tolerance", type=float, default=1.0, metavar="S", help="event match window (1 s)"
    )
    p.add_argument("--json", metavar="OUT", help="write the report here too")
    p.add_argument(
        "--appearance",
        action="store_true",
        help="the cascade run's edge with appearance in its tracker (edge.appearance on); the "
        "reference as shipped",
    )
    add_encoding_argument(p)
    p.add_argument(
        "--from",
        dest="from_dir",
        metavar="DIR",
        help="no daemons: evaluate the frames and events an earlier run saved in DIR "
        "(its --out) with the rules engine as it is now",
    )
    p.add_argument(
        "--retrack",
        metavar="YAML",
        nargs="?",
        const="{}",
        help="with --from: track both runs' saved detections again with the tracker as it "
        "is now, with these edge.tracking settings (inline YAML, e.g. '{recover_distance: 1}')",
    )


def _quick_setup(args: argparse.Namespace, out: Path, encoding: str) -> BenchSetup:
    """vtest's first 40 frames with its rules (a COCO detector sees its people); the
    synthetic clip's coloured shapes, which no real detector calls anything, only without it."""
    vtest = find_vtest(args.vtest)
    if vtest is not None and vtest.is_file():
        from strata.tools import cascade_clips

        clip = cascade_clips.make("vtest", vtest, out, QUICK_FRAMES)
        return BenchSetup(clip, out, VTEST_RULES, args.tolerance, 600.0, 50, encoding=encoding)
    from strata.shared.synthetic import SyntheticClip

    say(
        "vtest.mp4 not found: the quick run takes the synthetic clip (a real detector finds little)"
    )
    synthetic = SyntheticClip(width=640, height=480, frames=QUICK_FRAMES, fps=10, objects=4, seed=0)
    path = synthetic.write(out / "synthetic.mp4")
    return BenchSetup(path, out, SYNTHETIC_RULES, args.tolerance, 600.0, 50, encoding=encoding)


def run(args: argparse.Namespace) -> int:
    """The report as JSON on stdout; 1 when the reference does not agree with itself."""
    encoding = getattr(args, "encoding", "jpeg")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[0]
    if args.quick:
        setup = _quick_setup(args, out, encoding)
    else:
        vtest = find_vtest(args.vtest)
        if vtest is None or not vtest.is_file():
            say("vtest.mp4 not found (python .ci/test_data.py fetches it); use --quick")
            return 2
        setup = BenchSetup(vtest, out, VTEST_RULES, args.tolerance, encoding=encoding)
    setup = replace(setup, appearance=bool(getattr(args, "appearance", False)))
    if getattr(args, "from_dir", None):
        if getattr(args, "retrack", None) is not None:
            setup = replace(setup, retrack=_tracking(args.retrack))
        body = evaluate(Collected.load(Path(args.from_dir)), setup)
    else:
        body = measure(setup)
    doc = {
        "command": getattr(args, "command_line", "strata bench rules"),
        "encoding": encoding,
        "appearance": setup.appearance,
        "machine": {
            **machine.describe(),
            "load_avg_1m_at_start": load_start,
            "load_avg_1m_at_end": os.getloadavg()[0],
        },
        **headline(body),
        **body,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    (out / "rules.json").write_text(text + "\n")
    (out / "rules.md").write_text(markdown(doc))
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if doc["rules.reference_self_agreement"] == 1.0 else 1
