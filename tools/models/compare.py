"""`strata models compare`: detectors of any layouts side by side on one clip, in one run.

Each model is loaded through its repository (checksums and shapes checked) and run as the
edge runs it: the manifest's preprocessing into a batch of one, the model, the layout's
decoder. Reported per model and thread count: the median wall and CPU milliseconds a frame
for the whole path and for the model alone (the runs of every model interleaved, so load
from other processes hits all alike); and, against the first model (the reference), the
box agreement per label at IoU 0.5 with both cut at the same score (F1, the reference's
boxes as truth: agreement, not accuracy; neither model is ground truth).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from strata.shared.machine import cpu_line
from strata.shared.models.detector import DetectorSpec, detector_spec
from strata.shared.models.repository import LoadedModel, ModelRepository
from strata.shared.vision import FrameBoxes, LetterboxWriter, Thresholds, decode_detections
from strata.shared.vision.agreement import agreement as box_agreement
from strata.tools.models.quantize import read_frames


@dataclass(frozen=True, slots=True)
class Timing:
    """Median milliseconds a frame at one thread count."""

    threads: int
    wall_ms: float  # preprocess + model + decode
    cpu_ms: float
    model_wall_ms: float  # the model alone


@dataclass(frozen=True, slots=True)
class LabelAgreement:
    """One label's agreement with the reference."""

    label: str
    f1: float | None  # None: neither model found one
    reference_boxes: int
    boxes: int


@dataclass(frozen=True, slots=True)
class ModelResult:
    """One model's figures."""

    name: str
    layout: str
    input_size: int
    timings: list[Timing]
    labels: list[LabelAgreement] = field(default_factory=list)  # empty for the reference


@dataclass(frozen=True, slots=True)
class CompareReport:
    """The comparison and what it ran on."""

    clip: str
    frames: int
    score: float
    machine: str
    results: list[ModelResult]

    def markdown(self) -> str:
        """Two tables: speed, then agreement per label with the reference."""
        threads = [t.threads for t in self.results[0].timings]
        head = " | ".join(f"{t} thread{'s' if t > 1 else ''}: ms a frame (model)" for t in threads)
        lines = [
            f"| model | layout | input | {head} |",
            "| --- | --- | --- |" + " --- |" * len(threads),
        ]
        for r in self.results:
            cells = " | ".join(f"{t.wall_ms:.1f} ({t.model_wall_ms:.1f})" for t in r.timings)
            lines.append(f"| {r.name} | {r.layout} | {r.input_size} | {cells} |")
        labels = sorted({a.label for r in self.results for a in r.labels})
        if labels:
            lines += [
                "",
                f"| against {self.results[0].name} (F1, its boxes / this model's) | "
                + " | ".join(labels)
                + " |",
                "| --- |" + " --- |" * len(labels),
            ]
            for r in self.results[1:]:
                by = {a.label: a for a in r.labels}
                lines.append(
                    f"| {r.name} | " + " | ".join(_cell(by.get(lb)) for lb in labels) + " |"
                )
        return "\n".join(lines)


def _cell(a: LabelAgreement | None) -> str:
    if a is None:
        return "-"
    f1 = "-" if a.f1 is None else f"{a.f1:.3f}"
    return f"{f1} ({a.reference_boxes}/{a.boxes})"


class _Detector:
    """One model run as the edge runs it."""

    def __init__(
        self, loaded: LoadedModel, spec: DetectorSpec, th: Thresholds, threads: int
    ) -> None:
        self.loaded, self.spec, self.th, self.threads = loaded, spec, th, threads
        size = spec.preprocess.size
        self.writer = LetterboxWriter(size, spec.preprocess)
        self.batch = np.zeros((1, 3, size, size), np.float32)
        names = [o.name for o in loaded.runner.outputs]
        self.order = [names.index(n) for n in spec.outputs] if spec.outputs else None

    def model(self) -> list[np.ndarray]:
        outs = self.loaded.runner.run(self.batch)
        return outs if self.order is None else [outs[i] for i in self.order]

    def detect(self, image: np.ndarray) -> FrameBoxes:
        lb = self.writer.write(image, self.batch[0])
        return decode_detections(self.spec.layout, self.model(), [lb], self.th)[0]

    def close(self) -> None:
        self.loaded.close()

    def __enter__(self) -> _Detector:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class CompareRequest:
    """What to compare: repository models (the first is the reference) on a clip."""

    names: tuple[str, ...]
    clip: Path
    frames: int = 100
    threads: tuple[int, ...] = (1, 2)
    score: float = 0.5
    labels: tuple[str, ...] = ()  # empty: every label the reference found


def compare(repo: ModelRepository, req: CompareRequest) -> CompareReport:
    """Detections of every model on `frames` frames of the clip, agreement with the first
    per label, and interleaved timings."""
    names, threads, labels = req.names, req.threads, req.labels
    images = read_frames(req.clip, req.frames)
    th = Thresholds(req.score, 0.45, 300)
    boxes: dict[str, list[FrameBoxes]] = {}
    specs: dict[str, DetectorSpec] = {}
    for name in names:
        specs[name] = detector_spec(repo.manifest(name))
        with _open(repo, name, specs[name], th, 0) as det:
            boxes[name] = [det.detect(im) for im in images]
    timings: dict[str, list[Timing]] = {n: [] for n in names}
    for t in threads:
        opened = [_open(repo, n, specs[n], th, t) for n in names]
        try:
            for n, timing in zip(names, _time(opened, images), strict=True):
                timings[n].append(timing)
        finally:
            for det in opened:
                det.close()
    ref_name = names[0]
    ref_labels = specs[ref_name].labels
    results = []
    for n in names:
        agree = (
            []
            if n == ref_name
            else _per_label(boxes[ref_name], boxes[n], ref_labels, specs[n].labels, labels)
        )
        s = specs[n]
        results.append(ModelResult(n, s.layout.format, s.preprocess.size, timings[n], agree))
    return CompareReport(req.clip.name, len(images), req.score, cpu_line(), results)


def _open(
    repo: ModelRepository, name: str, spec: DetectorSpec, th: Thresholds, threads: int
) -> _Detector:
    return _Detector(repo.open(name, threads=threads), spec, th, threads)


def _time(dets: Sequence[_Detector], images: Sequence[np.ndarray]) -> list[Timing]:
    """Per detector: median wall and CPU ms of the whole path and wall ms of the model
    alone, a frame; every frame runs through each detector in turn (interleaved)."""
    for det in dets:  # warm-up
        for im in images[:3]:
            det.detect(im)
    wall: list[list[float]] = [[] for _ in dets]
    cpu: list[list[float]] = [[] for _ in dets]
    model: list[list[float]] = [[] for _ in dets]
    for im in images:
        for i, det in enumerate(dets):
            c0, t0 = time.process_time(), time.perf_counter()
            det.detect(im)
            wall[i].append((time.perf_counter() - t0) * 1e3)
            cpu[i].append((time.process_time() - c0) * 1e3)
            t1 = time.perf_counter()
            det.model()
            model[i].append((time.perf_counter() - t1) * 1e3)
    threads = dets[0].threads
    return [
        Timing(threads, statistics.median(w), statistics.median(c), statistics.median(m))
        for w, c, m in zip(wall, cpu, model, strict=True)
    ]


def _per_label(
    ref: Sequence[FrameBoxes],
    test: Sequence[FrameBoxes],
    ref_labels: Sequence[str],
    test_labels: Sequence[str],
    wanted: Sequence[str],
) -> list[LabelAgreement]:
    """Per label (matched by name across the two models' label lists), F1 at IoU 0.5."""
    found = {ref_labels[int(c)] for f in ref for c in f.class_ids}
    out = []
    for label in wanted or sorted(found):
        if label not in ref_labels or label not in test_labels:
            continue
        a, b = ref_labels.index(label), test_labels.index(label)
        r = [_only(f, a, 0) for f in ref]
        t = [_only(f, b, 0) for f in test]
        ag = box_agreement(r, t)
        n_ref = ag.true_positives + ag.false_negatives
        n_test = ag.true_positives + ag.false_positives
        out.append(LabelAgreement(label, ag.f1 if n_ref + n_test else None, n_ref, n_test))
    return out


def _only(f: FrameBoxes, class_id: int, as_id: int) -> FrameBoxes:
    keep = f.class_ids == class_id
    return FrameBoxes(f.boxes[keep], f.scores[keep], np.full(int(keep.sum()), as_id, np.int32))
