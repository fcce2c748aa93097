"""The cascade's cost and accuracy on one clip: two real pipeline runs, compared.

Reference: the device's gates and cascade off, raw frames scaled to the detector's input as
the cascade's device scales them (area interpolation; the codec is the only difference
left), so the edge's YOLO sees every frame, whatever its speed: the file is read unpaced, source
degradation is off, credits and the spool are sized for the whole clip, and a reference
with a frame left unanswered is refused (`ReferenceHolesError`), never scored. Cascade: as
shipped (accuracy target, H.264 at the model's input size, the edge's tracker answering
dropped frames), the clip played at its frame rate. Both runs are the real daemons over
loopback (`strata.tools.demo.pipeline`). Every frame is scored with what the edge published
for it; beside it, the uniform baseline at the same share of frames with the same tracker,
the stale-copy baseline, and object-level recall. On the synthetic clip the ground truth is
known, so the cascade is also scored against it (a dropped frame reuses the truth of the
last kept frame)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from strata.edge.tracking.calibration import class_boxes, replay
from strata.shared.config.base import merge
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision.agreement import Agreement, agreement, propagate, windowed_counting
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.bench.sampling import (
    CurvePoint,
    object_recall,
    reference_tracks,
    uniform_agreement,
    uniform_curve,
)
from strata.tools.demo.names import BYTES, COUNTS, Metric
from strata.tools.demo.pipeline import Outcome, PipelineRun, RunOptions
from strata.tools.demo.results import Received
from strata.tools.demo.scrape import Samples
from strata.tools.demo.stack import Camera
from strata.tools.demo.summary import drops, edge_latency_ns, value

log = logging.getLogger(__name__)

# The device's counters of the target (device/filters/cascade.py), summed over cameras.
UNDER_TARGET = Metric("device", "strata_device_cascade_under_target_total")
BOOSTED_KEPT = Metric("device", "strata_device_cascade_boosted_kept_total")
# By how much the device reports the target missed where it cannot keep more (last scrape).
TARGET_MISSED = Metric("device", "strata_device_cascade_target_missed")
# Frames the device kept for calibration bursts.
CALIBRATION_KEPT = Metric(
    "device",
    "strata_device_cascade_decisions_total",
    (("decision", "kept"), ("reason", "calibration")),
)

# Both runs: the edge must not shed frames (a shed reference frame has no answer), and the
# deep queue of a file read at full speed must not trigger batch-size degradation.
# The device must also wait for every ack at the end of the file: a file is read far faster
# than the edge detects, and frames still unacked when the agent gives up are lost.
NO_SHEDDING: dict[str, Any] = {
    "edge": {
        "batching": {"queue_per_camera": 100_000, "delay_target_ms": 0},
        # A shared CPU's inference p99 would trip GPU degradation (answers from cache).
        "overload": {"gpu_pressure": {"enabled": False}},
    },
    # The clip plays at its own frame rate, like a camera: the cascade's feedback from the
    # edge arrives while the clip still runs, as it would live.
    "device": {"sender": {"drain_timeout_s": 1800}, "source": {"realtime": True}},
}
GATES_OFF: dict[str, Any] = {
    "device": {
        "motion": {"enabled": False},
        "gate": {"enabled": False},
        "cascade": {"enabled": False},
        # The detector on every original frame, uncompressed (the cascade bench also fits
        # them to the detector's input: ClipSetup.model_input).
        "payload": {"scale_to_model": False},
        "sender": {"encoding": "bgr"},
    },
    # The reference needs only the detector; no crops for the cloud.
    "edge": {"crops": {"max_per_frame": 0}},
}
# The reference answers every frame whatever the detector's speed: the file is read as fast
# as the edge takes it (not at its frame rate), the edge's degradation levels cannot make
# the device drop, and credits never hold the window under its size. What waits for the
# edge waits in the spool, sized for the whole clip by `reference_overrides`.
REFERENCE_PACE: dict[str, Any] = {
    "device": {"source": {"realtime": False}, "degrade": {"enabled": False}},
    "edge": {"flow": {"initial_credits": 64, "min_credits": 64}},
}
# Spool headroom over the clip's frames (resends, the end-of-file header).
_SPOOL_SLACK_FRAMES = 64


def reference_overrides(frames: int, width: int, height: int) -> dict[str, Any]:
    """REFERENCE_PACE with a spool holding every raw frame of a `frames`-frame clip: the
    file is read faster than the edge detects, so the whole clip may wait at once."""
    mib = (frames + _SPOOL_SLACK_FRAMES) * width * height * 3 / 2**20
    spool = {"spool_frames": frames + _SPOOL_SLACK_FRAMES, "spool_mb": max(256.0, mib * 1.1)}
    return merge(REFERENCE_PACE, {"device": {"sender": {"window": 64, **spool}}})


class ReferenceHolesError(RuntimeError):
    """The reference left frames without an answer: every figure against it would score
    the cascade against empty frames, so none is given."""

    def __init__(self, clip: str, missing: int, total: int, why: Mapping[str, float]) -> None:
        self.clip, self.missing, self.total, self.why = clip, missing, total, dict(why)
        reasons = ", ".join(f"{k} {v:g}" for k, v in self.why.items()) or "no drop counted"
        super().__init__(
            f"{clip}: {missing} of {total} reference frames have no answer (drops by reason: "
            f"{reasons}); no agreement figure is given against a reference with holes"
        )


def reference_frames(
    clip: str,
    boxes: Mapping[int, FrameBoxes],
    total: int,
    why: Mapping[str, float],
) -> list[FrameBoxes]:
    """The reference's boxes of frames 0..total-1; raises ReferenceHolesError when any is
    missing (`why`: the run's drops by reason, for the message)."""
    missing = sum(1 for i in range(total) if i not in boxes)
    if missing:
        raise ReferenceHolesError(clip, missing, total, why)
    return [boxes[i] for i in range(total)]


# Event clips the device cut in the cascade run (kept on the device: no upload target), to
# put beside the cascade's bytes: what clips would cost a camera-day (issue 26).
CLIP_BYTES = Metric("device", "strata_device_clip_bytes_total")


def clips_overrides(workdir: Path) -> dict[str, Any]:
    """The cascade run cuts clips of its tracks into `workdir`/clips (never uploaded)."""
    return {"device": {"clips": {"enabled": True, "dir": str(workdir / "clips")}}}


# The cascade as shipped for the bench: payloads at the model's input size, relevance
# gate off (the starter gate keeps nearly every vtest frame), answers interpolated.
CASCADE: dict[str, Any] = {
    "device": {"gate": {"enabled": False}},
    "edge": {"tracking": {"answer": "interpolate"}},
}


def cascade_config(
    encoding: str = "jpeg", extra: dict[str, Any] | None = None, jpeg_quality: int | None = None
) -> dict[str, Any]:
    """The cascade run's config, its device sending `encoding` (jpeg: the default; at
    `jpeg_quality`, None: the device's default), with `extra` over it."""
    sender: dict[str, Any] = {"encoding": encoding}
    if jpeg_quality is not None:
        sender["jpeg_quality"] = jpeg_quality
    return merge(merge(CASCADE, {"device": {"sender": sender}}), extra or {})


class Labels:
    """Label names to small ints, shared by everything compared in one clip."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, label: str) -> int:
        """The id of `label` (new labels get the next id)."""
        return self.ids.setdefault(label, len(self.ids))


def boxes_of(results: Mapping[tuple[str, int], Received], labels: Labels) -> dict[int, FrameBoxes]:
    """Frame index -> the edge's boxes, for a run with one camera."""
    out = {}
    for (_camera, index), r in results.items():
        dets = r.message.detections
        boxes = np.array(
            [(d.box.x1, d.box.y1, d.box.x2, d.box.y2) for d in dets], np.float32
        ).reshape(-1, 4)
        classes = np.array([labels.id(d.label or str(d.class_id)) for d in dets], np.int32)
        scores = np.array([d.score for d in dets], np.float32)
        out[index] = FrameBoxes.of(boxes, classes, scores)
    return out


def detected_frames(results: Mapping[tuple[str, int], Received]) -> set[int]:
    """Frame indices the detector ran on (not answered from tracking)."""
    return {index for (_camera, index), r in results.items() if not r.message.predicted}


@dataclass
class ClipResult:
    """Everything measured on one clip."""

    clip: str
    frames_total: int
    frames_to_edge: int
    frames_to_cloud: int
    bytes_source: int
    bytes_to_edge: float
    bytes_to_cloud: float
    vs_reference: Agreement
    vs_truth: Agreement | None = None
    detector_vs_truth: Agreement | None = None
    reference_missing: int = 0
    edge_latency_ms: list[float] = field(default_factory=list)
    reference_fps: float = 0.0
    notes: list[str] = field(default_factory=list)
    # Frames the detector ran on (the rest answered by the edge's tracker).
    frames_detected: int = 0
    frames_unanswered: int = 0
    object_recall: float = 0.0
    objects: int = 0
    # Keeping the same share of frames evenly, with the same tracker answering the rest.
    uniform: Agreement | None = None
    # Copying the last kept frame's boxes instead (the old way).
    stale: Agreement | None = None
    # Cloud looks per tracked object: most and mean crops of one track (track id != 0).
    crops_per_track_max: int = 0
    crops_per_track_mean: float = 0.0
    untracked_crops: int = 0
    # Counting over 1 s windows (the clip's frame rate): the cascade, and uniform.
    counting_per_second: float = 0.0
    uniform_counting_per_second: float = 0.0
    # The uniform baseline at several shares of frames kept (for the curve).
    curve: list[CurvePoint] = field(default_factory=list)
    # (share kept, bytes of an H.264 stream of those frames at the model's size / file).
    bytes_curve: list[tuple[float, float]] = field(default_factory=list)
    # The edge's online estimate of the box F1 the cascade's spacing achieves, over the
    # whole run (strata_edge_estimate_agreeing / _weight, pooled by boxes like the measured
    # `vs_reference.f1`; the last window's gauge when those are absent); None: none made.
    estimated_f1: float | None = None
    estimated_counting: float | None = None
    # The last calibration window's estimate (strata_edge_estimated_accuracy).
    estimated_f1_last: float | None = None
    # The device's target (device.cascade.target, box F1), the edge's estimates under it
    # and the frames the device kept while boosted for them.
    target: float = 0.9
    estimates_under_target: int = 0
    boosted_kept: int = 0
    target_missed: float = 0.0
    # Of the frames sent, those of calibration bursts.
    calibration_kept: int = 0
    # Uniform spacing at twice the cascade's share (does the cascade need half the frames?).
    uniform_double: Agreement | None = None
    # How the edge answered the frames it did not detect (interpolated, predicted, timeout:
    # predicted after waiting tracking.hold_s), from strata_edge_answers.
    answers: dict[str, float] = field(default_factory=dict)
    # The detector on the frames the cascade sent against the reference on the same frames:
    # what the codec and scaling cost alone (1 at best; no estimate can see it).
    detected_vs_reference: Agreement | None = None
    # Bytes of the event clips the device cut over the clip (its tracks', pre- and
    # post-roll included); a clip still open at the last scrape is not in it.
    bytes_clips: float = 0.0
    # The clip's frame rate (its duration: frames_total / fps).
    fps: float = 0.0
    # With ClipSetup.through_codec: the detector on every frame through the cascade's JPEG
    # against the reference (what the codec alone costs: no spacing scores above it), and
    # uniform spacing at the cascade's share over those frames.
    through_codec: Agreement | None = None
    uniform_through_codec: Agreement | None = None


def run_once(workdir: Path, clip: Path, overrides: dict[str, Any], timeout_s: float) -> Outcome:
    """One pipeline run over `clip`; raises when a daemon died."""
    run = PipelineRun(
        workdir,
        [Camera("bench", str(clip))],
        overrides,
        RunOptions(quiet_s=1.5, drain_timeout_s=timeout_s, startup_timeout_s=120.0),
    )
    outcome = run.execute()
    if outcome.error is not None:
        raise RuntimeError(str(outcome.error))
    return outcome


def _device_target(result: ClipResult, cas: Outcome) -> None:
    """What the device said of its target: estimates under it, frames kept for them, and
    by how much it reported the target missed (last scrape)."""
    result.estimates_under_target = int(value(cas.scrapes, UNDER_TARGET))
    result.boosted_kept = int(value(cas.scrapes, BOOSTED_KEPT))
    result.target_missed = value(cas.scrapes, TARGET_MISSED)
    result.calibration_kept = int(value(cas.scrapes, CALIBRATION_KEPT))


def _count_crops(result: ClipResult, cas: Outcome) -> None:
    """Cloud looks per tracked object, and crops without a track."""
    per_track: dict[tuple[str, str, int], int] = {}
    for e in cas.events:
        if e.track_id:
            key = (e.edge_id, e.camera_id, e.track_id)
            per_track[key] = per_track.get(key, 0) + 1
        else:
            result.untracked_crops += 1
    if per_track:
        result.crops_per_track_max = max(per_track.values())
        result.crops_per_track_mean = sum(per_track.values()) / len(per_track)


ESTIMATE = "strata_edge_estimated_accuracy"
ESTIMATE_WEIGHT = "strata_edge_estimate_weight_total"
ESTIMATE_AGREEING = "strata_edge_estimate_agreeing_total"


def estimated_f1(scrapes: Mapping[str, Samples]) -> float | None:
    """The edge's last estimate of the cascade's box F1, averaged over its cameras."""
    edge = scrapes.get("edge")
    per_camera = edge.by_label(ESTIMATE, "camera") if edge is not None else {}
    return float(np.mean(list(per_camera.values()))) if per_camera else None


def run_estimate(scrapes: Mapping[str, Samples], metric: str = "f1") -> float | None:
    """The edge's estimate of `metric` (f1, counting) over the whole run, all cameras
    pooled; None when it scored nothing."""
    edge = scrapes.get("edge")
    if edge is None:
        return None
    weight = edge.total(ESTIMATE_WEIGHT, metric=metric)
    return edge.total(ESTIMATE_AGREEING, metric=metric) / weight if weight > 0 else None


def answers_by_how(scrapes: Mapping[str, Samples]) -> dict[str, float]:
    """The edge's answers for frames it did not detect, by how they were made."""
    edge = scrapes.get("edge")
    return edge.by_label("strata_edge_answers_total", "how") if edge is not None else {}


def cascade_target(overrides: Mapping[str, Any]) -> float:
    """device.cascade.target of the cascade run (the default unless overridden)."""
    from strata.shared.config.device import CascadeConfig

    given = overrides.get("device", {}).get("cascade", {}).get("target")
    return float(given) if given is not None else CascadeConfig().target


@dataclass(frozen=True, slots=True)
class ClipSetup:
    """How one clip is measured (beside the clip itself and its ground truth)."""

    # Config of both runs (e.g. the edge's detector: tools/bench/detector.py).
    overrides: dict[str, Any] = field(default_factory=dict)
    # The detector's input (width, height): the reference's device scales every frame to
    # fit it, from the first frame on, as the cascade's device does (area interpolation),
    # so the two see the same pixels but for the codec. None: original frames (the edge
    # letterboxes them with its own interpolation, and a detection near its score
    # threshold can come and go with the difference alone).
    model_input: tuple[int, int] | None = None
    timeout_s: float = 1800.0
    # The uniform baseline's curve and its bytes.
    curve: bool = False
    # What the cascade run's device sends the edge (the reference always sends raw frames).
    encoding: str = "jpeg"
    # Its JPEG quality (None: device.sender.jpeg_quality's default).
    jpeg_quality: int | None = None
    # A third run, the reference's through the cascade's JPEG: uniform spacing as a user
    # lowering the frame rate would send it (its kept frames pay the codec too).
    through_codec: bool = False

    def __post_init__(self) -> None:
        refusal = through_codec_refusal(self.encoding) if self.through_codec else None
        if refusal:
            raise ValueError(refusal)


def through_codec_refusal(encoding: str) -> str | None:
    """Why the through-codec run cannot take `encoding` (None: it can)."""
    if encoding == "jpeg":
        return None
    return (
        f"--uniform-through-codec takes the cascade's JPEG, not --encoding {encoding}: a "
        "stream of every frame is not what uniform spacing would send"
    )


def scaled_reference(model_input: tuple[int, int] | None) -> dict[str, Any]:
    """The reference's payload: fit to `model_input` (raw, uncompressed) when given."""
    if model_input is None:
        return {}
    width, height = model_input
    return {"device": {"payload": {"max_width": width, "max_height": height}}}


def measure_clip(
    clip: Path,
    workdir: Path,
    setup: ClipSetup = ClipSetup(),
    truth: list[FrameBoxes] | None = None,
    truth_labels: Labels | None = None,
) -> ClipResult:
    """Reference and cascade runs over `clip`, compared."""
    labels = truth_labels or Labels()
    extra = merge(NO_SHEDDING, setup.overrides)
    paced = merge(merge(extra, GATES_OFF), reference_overrides(*clip_shape(clip)))
    paced = merge(paced, scaled_reference(setup.model_input))
    ref = run_once(workdir / "reference", clip, paced, setup.timeout_s)
    ref_boxes = boxes_of(ref.results, labels)
    total = int(value(ref.scrapes, COUNTS["decoded"])) or (max(ref_boxes, default=-1) + 1)
    # Refused before the cascade runs: its figures would be scored against holes.
    reference = reference_frames(clip.name, ref_boxes, total, drops(ref.scrapes))
    clips_at = clips_overrides(workdir / "cascade")
    cascade = merge(cascade_config(setup.encoding, extra, setup.jpeg_quality), clips_at)
    cas = run_once(workdir / "cascade", clip, cascade, setup.timeout_s)
    cas_boxes = boxes_of(cas.results, labels)
    # Every frame is scored with what the edge published for it (detected or answered by
    # its tracker); a frame without any result counts as empty, and is counted.
    ours = [cas_boxes.get(i, FrameBoxes.empty()) for i in range(total)]
    unanswered = sum(1 for i in range(total) if i not in cas_boxes)
    detected = detected_frames(cas.results)
    kept = {i: b for i, b in cas_boxes.items() if i in detected}
    tracking = TrackingConfig(answer="interpolate")
    recall = object_recall(reference, reference_tracks(reference, tracking), kept)
    size = _frame_size(cas.results)
    fraction = len(detected) / total if total else 0.0
    uniform_a, uniform_kept = uniform_agreement(reference, fraction, tracking, *size)
    double, _ = uniform_agreement(reference, min(1.0, 2 * fraction), tracking, *size)
    sent = sorted(i for i in detected if i < total)
    second = max(1, round(clip_fps(clip)))
    uniform_out = replay(reference, uniform_kept, tracking, *size)
    codec = codec_reference(clip, workdir, paced, setup, labels, total)
    result = ClipResult(
        clip=clip.name,
        frames_total=total,
        # Frames whose pixels went to the edge (the other messages are header-only).
        frames_to_edge=len(detected),
        frames_to_cloud=len({(e.camera_id, e.sequence) for e in cas.events}),
        bytes_source=clip.stat().st_size,
        bytes_to_edge=value(cas.scrapes, BYTES["to_edge"]),
        bytes_to_cloud=value(cas.scrapes, BYTES["to_cloud"]),
        vs_reference=agreement(reference, ours),
        frames_detected=len(detected),
        frames_unanswered=unanswered,
        object_recall=recall.recall,
        objects=recall.total,
        uniform=uniform_a,
        counting_per_second=windowed_counting(reference, ours, second),
        uniform_counting_per_second=windowed_counting(
            reference, [class_boxes(o) for o in uniform_out], second
        ),
        stale=agreement(reference, propagate(kept, total)),
        edge_latency_ms=sorted((edge_latency_ns(cas.results) / 1e6).tolist()),
        reference_fps=len(ref.results) / ref.processing_s if ref.processing_s > 0 else 0.0,
        notes=[*ref.notes, *cas.notes],
        estimated_f1=run_estimate(cas.scrapes, "f1") or estimated_f1(cas.scrapes),
        estimated_counting=run_estimate(cas.scrapes, "counting"),
        estimated_f1_last=estimated_f1(cas.scrapes),
        target=cascade_target(cascade),
        uniform_double=double,
        detected_vs_reference=agreement([reference[i] for i in sent], [cas_boxes[i] for i in sent]),
        bytes_clips=value(cas.scrapes, CLIP_BYTES),
        answers=answers_by_how(cas.scrapes),
        fps=clip_fps(clip),
    )
    if unanswered:
        result.notes.append(f"{unanswered} frames had no cascade result (counted as empty)")
    _through_codec(result, reference, codec, fraction, size)
    _count_crops(result, cas)
    _device_target(result, cas)
    if setup.curve:
        _curves(result, clip, reference, size)
    if truth is not None:
        _score_truth(result, truth[:total], reference, detected)
    return result


def codec_reference(
    clip: Path,
    workdir: Path,
    paced: dict[str, Any],
    setup: ClipSetup,
    labels: Labels,
    total: int,
) -> list[FrameBoxes] | None:
    """With `setup.through_codec`: the reference run again (`paced`), its device sending
    every frame as the cascade's sends its kept ones (JPEG from the decoder's planes at
    the model's input); the boxes of frames 0..total-1. None without it."""
    if not setup.through_codec:
        return None
    sender: dict[str, Any] = {"encoding": "jpeg"}
    if setup.jpeg_quality is not None:
        sender["jpeg_quality"] = setup.jpeg_quality
    run = run_once(
        workdir / "through-codec",
        clip,
        merge(paced, {"device": {"sender": sender}}),
        setup.timeout_s,
    )
    return reference_frames(clip.name, boxes_of(run.results, labels), total, drops(run.scrapes))


def _through_codec(
    result: ClipResult,
    reference: list[FrameBoxes],
    codec: list[FrameBoxes] | None,
    fraction: float,
    size: tuple[int, int],
) -> None:
    """The codec run's figures (`codec_reference`), when it ran."""
    if codec is not None:
        result.through_codec = agreement(reference, codec)
        tracking = TrackingConfig(answer="interpolate")
        result.uniform_through_codec, _ = uniform_agreement(
            reference, fraction, tracking, *size, frames=codec
        )


def _curves(
    result: ClipResult, clip: Path, reference: list[FrameBoxes], size: tuple[int, int]
) -> None:
    """Uniform spacing's agreement and bytes at several shares (the cost curve)."""
    tracking = TrackingConfig(answer="interpolate")
    result.curve = uniform_curve(reference, CURVE_FRACTIONS, tracking, *size)
    result.bytes_curve = bytes_curve(clip, len(reference), CURVE_FRACTIONS, max(size) or 320)


def _score_truth(
    result: ClipResult, truth: list[FrameBoxes], reference: list[FrameBoxes], detected: set[int]
) -> None:
    """Against a synthetic clip's ground truth: the cascade's kept frames, and the detector."""
    truth_kept = {i: truth[i] for i in detected if i < len(truth)}
    result.vs_truth = agreement(truth, propagate(truth_kept, len(truth)))
    result.detector_vs_truth = agreement(truth, reference[: len(truth)])


CURVE_FRACTIONS = (0.1, 0.15, 0.2, 0.3, 0.4, 0.6)


def bytes_curve(
    clip: Path, total: int, fractions: tuple[float, ...], side: int = 320
) -> list[tuple[float, float]]:
    """Bytes of an H.264 stream (the agent's encoder, frames fit to the detector's `side`)
    of `fraction` of the frames, evenly spaced, over the clip file's size."""
    from strata.edge.tracking.calibration import uniform
    from strata.tools.bench.payloads import h264_bytes

    size = clip.stat().st_size
    return [(f, h264_bytes(clip, uniform(total, f), side) / size) for f in fractions]


def clip_shape(clip: Path) -> tuple[int, int, int]:
    """(frames, width, height) of the clip's video stream (frames counted by demuxing when
    the container does not say)."""
    import av

    with av.open(str(clip)) as f:
        stream = f.streams.video[0]
        width, height, frames = stream.width, stream.height, stream.frames
        if not frames:
            frames = sum(1 for p in f.demux(stream) if p.size)
    return int(frames), int(width), int(height)


def clip_fps(clip: Path) -> float:
    """The clip's frame rate (its video stream's average; 0 when unknown)."""
    import av

    with av.open(str(clip)) as f:
        rate = f.streams.video[0].average_rate
    return float(rate) if rate else 0.0


def _frame_size(results: Mapping[tuple[str, int], Received]) -> tuple[int, int]:
    for r in results.values():
        if r.message.width and r.message.height:
            return int(r.message.width), int(r.message.height)
    return 0, 0


def synthetic_truth(clip: Any, labels: Labels) -> list[FrameBoxes]:
    """Ground truth of a SyntheticClip as FrameBoxes, labels by name."""
    out = []
    for i in range(len(clip)):
        gt = clip.boxes(i)
        boxes = np.array([(b.x1, b.y1, b.x2, b.y2) for b in gt], np.float32).reshape(-1, 4)
        classes = np.array([labels.id(b.label) for b in gt], np.int32)
        out.append(FrameBoxes.of(boxes, classes))
    return out
