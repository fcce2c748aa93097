"""`strata bench gate`: what the site gate (device/filters/site_gate.py) saves on footage whose
motion is not objects, against the motion gate alone, and what it costs in agreement.

Per clip, every frame goes through the device's motion gate (default `device.motion`) and
the detector (the starter repository's COCO detector unless `--model-repository`/`--model`,
the site's tracked labels at their default score): the detector's boxes on every frame are
the reference, and its answer on a kept frame (boxes of tracked labels: any or none) is what
the edge tells the device. The frames the motion gate keeps go, in order, through the site
gate exactly as the device runs it (the frozen backbone, one head per camera, held-out
probes), each answered `--answer-lag` kept frames later. Scored like the cascade bench: the
kept frames replayed through the edge's own tracker (`edge.tracking.calibration.replay`)
against the reference (box F1, counting), for the motion gate alone and with the site gate;
and the site gate's output against the motion gate's (what the drops cost).

The nuisance clips are made from the project's quiet clip (vtest's passages of people
between stretches of its own empty street; tools/cascade_clips.py): `light` (the light steps
every few seconds, as clouds pass), `rain` (streaks and sensor noise on every frame) and
`foliage` (the top-left quarter sways) are synthesised; `tree` puts real foliage there:
OpenCV's tree.avi (a tree in wind, 68 frames at 15 fps; `python .ci/test_data.py --unseen`
writes data/unseen/tree.mp4) fills the top-left quarter, played forth and back at its own
rate, so its leaves move on every frame while the people pass below and to the right.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CLIPS = ("vtest", "quiet", "light", "rain", "foliage", "tree")
# The real foliage clip `tree` is pasted from (tools/bench/gate.py's docstring).
TREE = Path("data/unseen/tree.mp4")


@dataclass(frozen=True, slots=True)
class GateClipResult:
    """One clip's figures."""

    clip: str
    frames: int
    object_frames: int  # frames the reference has an object in
    moving_frames: int  # frames with a moving object (the gate's positives)
    motion_kept: int
    site_kept: int
    site_dropped: int
    object_frames_dropped: int  # kept by motion, with an object, dropped by the site gate
    moving_frames_dropped: int  # the same, with a moving object
    probes: int
    training_samples: int
    switched_on_at: int | None  # frame index of the first switch on
    switches_off: int
    final_recall: float | None
    f1_motion: float
    counting_motion: float
    f1_site: float
    counting_site: float
    f1_vs_motion: float
    counting_vs_motion: float
    backbone_ms: float  # median wall ms a frame of the backbone, batch of one


@dataclass
class _Run:
    motion: list[bool] = field(default_factory=list)
    scene: list[bool] = field(default_factory=list)
    reference: list[Any] = field(default_factory=list)
    # Per frame: what the edge answers for it (its moving objects, edge/publish/moving.py).
    moving: list[int] = field(default_factory=list)
    features: dict[int, np.ndarray] = field(default_factory=dict)
    backbone_ms: list[float] = field(default_factory=list)
    width: int = 0
    height: int = 0


class ReferenceDetector:
    """The reference detector, run as the edge runs it (batch of one)."""

    def __init__(self, repository: str | None, name: str, track: Sequence[str]) -> None:
        from strata.shared.models import ModelRepository
        from strata.shared.models.detector import detector_spec
        from strata.shared.vision import LetterboxWriter, Thresholds

        repo = ModelRepository(repository or None)
        self.loaded = repo.open(name, threads=1)
        self.spec = detector_spec(self.loaded.manifest)
        size = self.spec.preprocess.size
        self.writer = LetterboxWriter(size, self.spec.preprocess)
        self.batch = np.zeros((1, 3, size, size), np.float32)
        names = [o.name for o in self.loaded.runner.outputs]
        self.order = [names.index(n) for n in self.spec.outputs] if self.spec.outputs else None
        self.th = Thresholds(0.5, 0.45, 300)
        wanted = set(track)
        self.tracked = np.array([lb in wanted for lb in self.spec.labels], bool)
        self.name = name

    def detect(self, image: np.ndarray) -> Any:
        from strata.shared.vision import FrameBoxes, decode_detections

        lb = self.writer.write(image, self.batch[0])
        outs = self.loaded.runner.run(self.batch)
        outs = outs if self.order is None else [outs[i] for i in self.order]
        boxes = decode_detections(self.spec.layout, outs, [lb], self.th)[0]
        keep = self.tracked[boxes.class_ids] if len(boxes) else np.zeros(0, bool)
        return FrameBoxes(boxes.boxes[keep], boxes.scores[keep], boxes.class_ids[keep])

    def close(self) -> None:
        self.loaded.close()


def _decode(path: Path, frames: int) -> Iterator[np.ndarray]:
    import av

    with av.open(str(path)) as f:
        for i, frame in enumerate(f.decode(video=0)):
            if frames and i >= frames:
                return
            yield frame.to_ndarray(format="bgr24")


def _light(images: Iterator[np.ndarray], seed: int) -> Iterator[np.ndarray]:
    """The light steps to a new level every 2-5 s (10 fps) over half a second."""
    rng = np.random.default_rng(seed)
    level, target, left = 1.0, 1.0, 0
    for img in images:
        if left <= 0:
            target = float(rng.uniform(0.65, 1.35))
            left = int(rng.integers(20, 50))
        left -= 1
        level += (target - level) * 0.35
        yield np.clip(img.astype(np.float32) * level, 0, 255).astype(np.uint8)


def _rain(images: Iterator[np.ndarray], seed: int) -> Iterator[np.ndarray]:
    """Bright diagonal streaks (400 a frame) and sensor noise (sigma 6)."""
    import cv2

    rng = np.random.default_rng(seed)
    for img in images:
        h, w = img.shape[:2]
        layer = np.zeros((h, w), np.uint8)
        xs = rng.integers(0, w, 400)
        ys = rng.integers(0, h, 400)
        for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
            cv2.line(layer, (x, y), (x + 4, y + 18), 90, 1)
        noise = rng.normal(0, 6, (h, w, 1)).astype(np.float32)
        out = img.astype(np.float32) + layer[..., None] + noise
        yield np.clip(out, 0, 255).astype(np.uint8)


def _foliage(images: Iterator[np.ndarray], seed: int) -> Iterator[np.ndarray]:
    """The top-left quarter of the frame (vtest's facade and lawn, clear of the van parked
    top right) sways as leaves in the wind: rows shifted by a sine of a few pixels that
    changes with time and height, with gusts."""
    import cv2

    rng = np.random.default_rng(seed)
    phase = 0.0
    for t, img in enumerate(images):
        h, w = img.shape[:2]
        top, left = h // 2, w // 2
        gust = 1.0 + 0.8 * math.sin(t / 23.0) + float(rng.normal(0, 0.1))
        phase += 0.6
        rows = np.arange(top, dtype=np.float32)
        shift = (6.0 * gust * np.sin(rows / 9.0 + phase)).astype(np.float32)
        map_x = (np.arange(left, dtype=np.float32)[None, :] + shift[:, None]).astype(np.float32)
        map_y = np.repeat(rows[:, None], left, axis=1)
        out = img.copy()
        patch = np.ascontiguousarray(img[:top, :left])
        out[:top, :left] = cv2.remap(patch, map_x, map_y, cv2.INTER_LINEAR, cv2.BORDER_REFLECT)
        yield out


def _tree(images: Iterator[np.ndarray], tree: Path, fps: float) -> Iterator[np.ndarray]:
    """The top-left quarter of each frame replaced by the tree clip's frame at the same
    time, the tree played forth and back (no jump where it loops)."""
    import av
    import cv2

    with av.open(str(tree)) as f:
        rate = float(f.streams.video[0].average_rate or 15)
        leaves = [fr.to_ndarray(format="bgr24") for fr in f.decode(video=0)]
    if len(leaves) < 2:
        raise SystemExit(f"{tree}: fewer than two frames; rewrite it with .ci/test_data.py")
    cycle = 2 * len(leaves) - 2
    quarter: list[np.ndarray] = []
    for t, img in enumerate(images):
        h, w = img.shape[:2]
        if not quarter:
            quarter = [
                cv2.resize(leaf, (w // 2, h // 2), interpolation=cv2.INTER_AREA) for leaf in leaves
            ]
        k = int(t * rate / fps) % cycle
        out = img.copy()
        out[: h // 2, : w // 2] = quarter[k if k < len(leaves) else cycle - k]
        yield out


def check_clip(name: str, tree: Path) -> None:
    """A clip this bench makes, with what it is made from at hand; else the fix."""
    if name not in CLIPS:
        raise SystemExit(f"unknown clip {name!r}: one of {', '.join(CLIPS)}")
    if name == "tree" and not tree.is_file():
        others = ",".join(c for c in CLIPS if c != "tree")
        raise SystemExit(
            f"clip tree: {tree} missing: `python .ci/test_data.py --unseen` writes it "
            f"(OpenCV's tree.avi), or pass --tree FILE, or --clips {others}"
        )


def clip_frames(
    name: str, vtest: Path, workdir: Path, frames: int, tree: Path = TREE
) -> Iterator[np.ndarray]:
    """BGR frames of clip `name` (vtest itself, the quiet clip, or a nuisance made from it)."""
    from strata.tools.cascade_clips import make

    check_clip(name, tree)
    if name == "vtest":
        return _decode(vtest, frames)
    quiet = _decode(make("quiet", vtest, workdir), frames)
    if name == "quiet":
        return quiet
    if name == "tree":
        from .cascade import clip_fps

        return _tree(quiet, tree, clip_fps(vtest))
    nuisance = {"light": _light, "rain": _rain, "foliage": _foliage}
    return nuisance[name](quiet, seed=len(name))


def _observe(
    images: Iterator[np.ndarray], det: ReferenceDetector, backbone: Any, fps: float
) -> _Run:
    """Motion gate, reference boxes and (motion-kept frames) features, per frame."""
    from strata.device.filters.motion import MotionGate
    from strata.shared.config.device import MotionConfig

    motion = MotionGate(MotionConfig())
    run = _Run()
    for i, img in enumerate(images):
        run.height, run.width = img.shape[:2]
        d = motion.check(img, i / fps)
        run.motion.append(d.keep)
        run.scene.append(d.scene_change)
        run.reference.append(det.detect(img))
        if d.keep:
            t0 = time.perf_counter()
            run.features[i] = backbone.embed([img])[0]
            run.backbone_ms.append((time.perf_counter() - t0) * 1000.0)
    run.moving = moving_answers(run.reference)
    return run


def moving_answers(reference: Sequence[Any]) -> list[int]:
    """The edge's answer for each frame (its moving objects), from the edge's tracker run on
    every frame's boxes: what the device hears for the frames it sends."""
    from strata.edge.publish.moving import MovingObjects
    from strata.edge.tracking.tracker import Tracker
    from strata.shared.config.edge import TrackingConfig

    tracker = Tracker(TrackingConfig())
    moving = MovingObjects()
    return [
        moving.count(1, "cam", tracker.update(i, boxes), len(boxes))
        for i, boxes in enumerate(reference)
    ]


def simulate(run: _Run, settings: Any, lag: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The site gate over the motion-kept frames in order, answers `lag` kept frames late:
    the kept mask and the gate's counters."""
    from strata.device.filters.site_gate import SiteGate

    gate = SiteGate(next(iter(run.features.values())).shape[0], settings)
    kept = np.asarray(run.motion, bool).copy()
    waiting: deque[int] = deque()
    on_at: int | None = None
    offs = 0
    was_on = False
    for i in sorted(run.features):
        keep = gate.decide("cam", [i], run.features[i][None, :])[0]
        if not keep and not run.scene[i]:
            kept[i] = False
        else:
            waiting.append(i)
        while len(waiting) > lag:
            j = waiting.popleft()
            gate.answer("cam", j, run.moving[j])
        now_on = gate.is_on("cam")
        if now_on and on_at is None:
            on_at = i
        if was_on and not now_on:
            offs += 1
        was_on = now_on
    while waiting:
        j = waiting.popleft()
        gate.answer("cam", j, run.moving[j])
    st = gate.status("cam")
    info = {
        "probes": 0 if st is None else st.positives + st.negatives,
        "samples": 0 if st is None else st.samples,
        "on_at": on_at,
        "offs": offs,
        "recall": None if st is None else st.recall,
    }
    return kept, info


def _score(run: _Run, kept: np.ndarray) -> list[Any]:
    from strata.edge.tracking.calibration import class_boxes, replay
    from strata.shared.config.edge import TrackingConfig

    out = replay(run.reference, kept, TrackingConfig(), run.width, run.height)
    return [class_boxes(o) for o in out]


def measure(name: str, run: _Run, settings: Any, lag: int) -> GateClipResult:
    """One clip's figures from its observed frames."""
    from strata.edge.tracking.calibration import class_boxes
    from strata.shared.vision.agreement import agreement

    motion = np.asarray(run.motion, bool)
    site, info = simulate(run, settings, lag)
    ref = [class_boxes(r) for r in run.reference]
    by_motion = _score(run, motion)
    by_site = _score(run, site)
    a_motion = agreement(ref, by_motion)
    a_site = agreement(ref, by_site)
    a_vs = agreement(by_motion, by_site)
    has_obj = np.array([len(r) > 0 for r in run.reference], bool)
    dropped = motion & ~site
    return GateClipResult(
        clip=name,
        frames=len(motion),
        object_frames=int(has_obj.sum()),
        moving_frames=int(sum(1 for m in run.moving if m > 0)),
        motion_kept=int(motion.sum()),
        site_kept=int(site.sum()),
        site_dropped=int(dropped.sum()),
        object_frames_dropped=int((dropped & has_obj).sum()),
        moving_frames_dropped=int((dropped & (np.asarray(run.moving) > 0)).sum()),
        probes=int(info["probes"]),
        training_samples=int(info["samples"]),
        switched_on_at=info["on_at"],
        switches_off=int(info["offs"]),
        final_recall=info["recall"],
        f1_motion=a_motion.f1,
        counting_motion=a_motion.counting,
        f1_site=a_site.f1,
        counting_site=a_site.counting,
        f1_vs_motion=a_vs.f1,
        counting_vs_motion=a_vs.counting,
        backbone_ms=float(np.median(run.backbone_ms)) if run.backbone_ms else 0.0,
    )


def markdown(rows: Sequence[GateClipResult]) -> str:
    """The report's table."""
    lines = [
        "| clip | frames (with objects / moving) | motion kept "
        "| site gate dropped (of them with objects / moving) "
        "| share of motion frames saved | switched on at frame | box F1 motion / +site "
        "| counting motion / +site | F1 / counting vs motion alone | held-out recall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        saved = r.site_dropped / r.motion_kept if r.motion_kept else 0.0
        recall = "-" if r.final_recall is None else f"{r.final_recall:.3f}"
        on = "never" if r.switched_on_at is None else str(r.switched_on_at)
        if r.switches_off:
            on += f" (off {r.switches_off}x)"
        lines.append(
            f"| {r.clip} | {r.frames} ({r.object_frames} / {r.moving_frames}) | {r.motion_kept} "
            f"| {r.site_dropped} ({r.object_frames_dropped} / {r.moving_frames_dropped}) "
            f"| {saved:.1%} | {on} "
            f"| {r.f1_motion:.3f} / {r.f1_site:.3f} | {r.counting_motion:.3f} / "
            f"{r.counting_site:.3f} | {r.f1_vs_motion:.3f} / {r.counting_vs_motion:.3f} "
            f"| {recall} |"
        )
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench gate`'s options."""
    p.add_argument("--vtest", help="vtest.mp4 (default: data/vtest.mp4)")
    p.add_argument(
        "--clips", default=",".join(CLIPS), help=f"comma-separated, of {', '.join(CLIPS)}"
    )
    p.add_argument("--frames", type=int, default=0, help="first N frames of each clip (0: all)")
    p.add_argument("--workdir", default="bench-gate", help="where the made clips are kept")
    p.add_argument("--tree", default=str(TREE), help=f"the tree clip's source ({TREE})")
    p.add_argument("--model-repository", default="", help="the detector's repository")
    p.add_argument("--model", default="", help="the detector (default: the edge's default)")
    p.add_argument(
        "--answer-lag", type=int, default=4, help="kept frames before a frame's answer (4)"
    )
    p.add_argument(
        "--site",
        metavar="YAML",
        help="device.gate.site settings (inline YAML, e.g. '{min_positives: 20}')",
    )
    p.add_argument("--json", metavar="OUT", help="write the rows here too")


def _observed(
    name: str, args: argparse.Namespace, det: ReferenceDetector, backbone: Any, where: Any
) -> _Run:
    """The clip's observed frames, from the workdir's cache when an earlier run with the
    same clip, frames and detector left them (only the site gate's simulation reruns)."""
    import pickle

    vtest, workdir, fps = where
    cache = workdir / f"observed-{name}-{args.frames}-{det.name}.pkl"
    if cache.is_file():
        observed: _Run = pickle.loads(cache.read_bytes())
        return observed
    images = clip_frames(name, vtest, workdir, args.frames, Path(args.tree))
    observed = _observe(images, det, backbone, fps)
    cache.write_bytes(pickle.dumps(observed))
    return observed


def run(args: argparse.Namespace) -> int:
    """The table on stdout (and JSON with --json)."""
    import yaml
    from strata.device.filters.site_gate import head_settings, load_backbone
    from strata.shared.config.device import GateConfig, SiteGateConfig
    from strata.shared.config.edge import DEFAULT_DETECTOR
    from strata.shared.config.objects import ObjectsConfig
    from strata.shared.machine import cpu_line
    from strata.tools.clips import find_vtest

    from .cascade import clip_fps

    vtest = find_vtest(args.vtest)
    if vtest is None:
        raise SystemExit("data/vtest.mp4 missing: run `python .ci/test_data.py` or pass --vtest")
    names = [c.strip() for c in args.clips.split(",") if c.strip()]
    for name in names:
        check_clip(name, Path(args.tree))
    site = GateConfig().site
    if args.site:
        site = SiteGateConfig.model_validate({**site.model_dump(), **yaml.safe_load(args.site)})
    det = ReferenceDetector(
        args.model_repository, args.model or DEFAULT_DETECTOR, ObjectsConfig().track
    )
    backbone = load_backbone(site.model, threads=1)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    fps = clip_fps(vtest)
    rows = []
    try:
        for name in names:
            t0 = time.monotonic()
            observed = _observed(name, args, det, backbone, (vtest, workdir, fps))
            rows.append(measure(name, observed, head_settings(site), args.answer_lag))
            print(f"{name}: {len(observed.motion)} frames in {time.monotonic() - t0:.0f} s")
    finally:
        det.close()
        backbone.close()
    print(f"\ndetector {det.name}; backbone {site.model}; site gate {site.model_dump()}")
    print(f"{cpu_line()}\n")
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0
