"""INT8 calibrated on the site's own frames, kept only when it agrees with the FP32 model.

`strata models quantize MODEL --calibration CLIP_OR_FRAMES... --held-out CLIP...`:

1. Calibration frames come from the site's own cameras: clips (a device's kept clips, a
   recording) or folders of frames (JPEG/PNG a device kept). They are preprocessed exactly
   as the edge preprocesses them: the manifest's preprocess (`detector.preprocess_of`)
   through the edge's own `LetterboxWriter`.
2. The FP32 model is quantized (NNCF on OpenVINO, or ONNX Runtime's QDQ) with the
   detection head's last convolutions and the decode after them kept in float, trying
   recipes that keep more in float (`int8_engines.LADDER`) until one agrees.
3. Agreement is measured against the FP32 model on held-out frames of clips the
   calibration did not see: box F1 at IoU 0.5 with matching labels, recall per label, both
   at the score the edge publishes (objects.filters' default min_score 0.5); and frames a
   second of both models, interleaved in one run.
4. Below the threshold (0.95 by default; docs/models.md) the quantizer refuses: nothing is
   written into the repository, and the report says the figure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from strata.shared.models.detector import detector_spec, layout_of, preprocess_of
from strata.shared.models.manifest import Manifest, Variant, save_manifest
from strata.shared.models.repository import ModelError, ModelRepository, sha256_of
from strata.shared.vision.agreement import agreement as box_agreement
from strata.shared.vision.boxes import FrameBoxes, match_count
from strata.shared.vision.layouts import decode_detections
from strata.shared.vision.letterbox import Letterbox, LetterboxWriter
from strata.shared.vision.nms import Thresholds
from strata.tools.models.int8_engines import (
    LADDER,
    Engine,
    Recipe,
    Runner,
    frames_per_second,
    make_engine,
)

DEFAULT_THRESHOLD = 0.95
DEFAULT_SCORE = 0.5  # objects.filters' default min_score: what the edge publishes
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
REPORT_FILE = "int8_report.json"


@dataclass(frozen=True, slots=True)
class SiteQuantizeRequest:
    """What `strata models quantize --calibration` was asked for."""

    model: str  # a model name in the repository
    calibration: tuple[Path, ...]
    held_out: tuple[Path, ...]
    engine: Engine = "openvino"
    threshold: float = DEFAULT_THRESHOLD
    calibration_frames: int = 128
    held_out_frames: int = 100
    score: float = DEFAULT_SCORE
    iou: float = 0.45
    threads: int = 0
    timing_runs: int = 30
    variant: str = ""  # default int8-<engine>
    recipes: tuple[Recipe, ...] = LADDER

    @property
    def variant_key(self) -> str:
        """The manifest's variant key for the result."""
        return self.variant or f"int8-{self.engine}"


@dataclass(frozen=True, slots=True)
class LabelRecall:
    """How many of the FP32 model's boxes of one label the INT8 model found."""

    label: str
    reference: int
    matched: int

    @property
    def recall(self) -> float:
        """matched / reference (1.0 when the FP32 model found none)."""
        return self.matched / self.reference if self.reference else 1.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One recipe's INT8 model against the FP32 one on the held-out frames."""

    recipe: str
    kept_float: tuple[str, ...]
    box_f1: float
    true_positives: int
    false_positives: int
    false_negatives: int
    per_label: tuple[LabelRecall, ...]
    float_convs: tuple[str, ...] = ()  # the learned layers among kept_float


@dataclass(frozen=True, slots=True)
class SiteQuantizeReport:
    """Everything measured; written as JSON beside the INT8 model, printed either way."""

    model: str
    engine: str
    engine_version: str
    threshold: float
    score: float
    calibration: tuple[str, ...]
    calibration_frames: int
    held_out: tuple[str, ...]
    held_out_frames: int
    reference_boxes: int
    fp32_fps: float
    int8_fps: float  # of the chosen (or best) attempt
    attempts: tuple[Attempt, ...]
    machine: str
    variant: str = ""  # the variant key written; "" when refused
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def best(self) -> Attempt:
        """The attempt that agreed best."""
        return max(self.attempts, key=lambda a: a.box_f1)

    @property
    def passed(self) -> bool:
        """Whether the best attempt reached the threshold."""
        return self.best.box_f1 >= self.threshold

    @property
    def speedup(self) -> float:
        """INT8 frames a second over FP32's."""
        return self.int8_fps / max(self.fp32_fps, 1e-9)

    def to_json(self) -> str:
        """The report as JSON (with `passed`, `best` and `speedup` spelled out)."""
        data: dict[str, Any] = asdict(self)
        for a, raw in zip(self.attempts, data["attempts"], strict=True):
            for lr, row in zip(a.per_label, raw["per_label"], strict=True):
                row["recall"] = round(lr.recall, 4)
        data |= {"passed": self.passed, "best_box_f1": self.best.box_f1}
        data["speedup"] = round(self.speedup, 3)
        return json.dumps(data, indent=2)

    def text(self) -> str:
        """What the command prints."""
        b = self.best
        verdict = (
            f"PASSED: box F1 {b.box_f1:.3f} >= {self.threshold}"
            if self.passed
            else f"REFUSED: box F1 {b.box_f1:.3f} < {self.threshold} (best of "
            f"{len(self.attempts)} recipes); no INT8 model written"
        )
        lines = [
            f"{self.model} INT8 ({self.engine_version}): {verdict}",
            f"  calibration   {self.calibration_frames} frames of {', '.join(self.calibration)}",
            f"  held out      {self.held_out_frames} frames of {', '.join(self.held_out)}; "
            f"{self.reference_boxes} FP32 boxes at score >= {self.score}",
            f"  frames/s      fp32 {self.fp32_fps:.1f}, int8 {self.int8_fps:.1f} "
            f"(x{self.speedup:.2f}, batch 1, interleaved; {self.machine})",
        ]
        for a in self.attempts:
            lines.append(
                f"  recipe        {a.recipe}: box F1 {a.box_f1:.3f} (tp {a.true_positives}, "
                f"fp {a.false_positives}, fn {a.false_negatives}; {len(a.kept_float)} nodes "
                "in float)"
            )
        lines.append(
            f"  float convs   {', '.join(b.float_convs) or 'none'} (+ "
            f"{len(b.kept_float) - len(b.float_convs)} decode nodes)"
        )
        recalls = ", ".join(
            f"{lr.label} {lr.recall:.3f} ({lr.matched}/{lr.reference})" for lr in b.per_label
        )
        lines.append(f"  recall        {recalls or 'no FP32 boxes'}")
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.variant:
            lines.append(f"  written       variant {self.variant!r}: {', '.join(self.files)}")
        return "\n".join(lines)


class QuantizeRefusedError(Exception):
    """The INT8 model did not agree well enough; `report` has the figures."""

    def __init__(self, report: SiteQuantizeReport) -> None:
        b = report.best
        super().__init__(
            f"refused: INT8 box F1 {b.box_f1:.3f} against FP32 on {report.held_out_frames} "
            f"held-out frames is under the threshold {report.threshold}; nothing was written. "
            "Calibrate on more of the site's frames (--calibration-frames, more clips) or keep "
            "the FP32 model"
        )
        self.report = report


def site_frames(sources: Sequence[Path], count: int) -> list[np.ndarray]:
    """`count` BGR frames spread over `sources` (clips, image files, folders of images)."""
    from strata.tools.models.quantize import read_frames

    if not sources:
        raise ValueError("no frame sources given")
    per = [count // len(sources) + (i < count % len(sources)) for i in range(len(sources))]
    frames: list[np.ndarray] = []
    for src, n in zip(sources, per, strict=True):
        if n <= 0:
            continue
        if src.is_dir() or src.suffix.lower() in IMAGE_SUFFIXES:
            frames.extend(_images(src, n))
        else:
            frames.extend(read_frames(src, n))
    return frames


def _images(src: Path, count: int) -> list[np.ndarray]:
    import cv2

    if not src.exists():
        raise FileNotFoundError(f"frames {src} not found")
    files = (
        sorted(p for p in src.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if src.is_dir()
        else [src]
    )
    if not files:
        raise ValueError(f"no {'/'.join(IMAGE_SUFFIXES)} frames in {src}")
    stride = max(len(files) / count, 1.0)
    picked = sorted({files[min(int(i * stride), len(files) - 1)] for i in range(count)})
    out = []
    for p in picked:
        img = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"cannot read {p} as an image")
        out.append(img)
    return out


def edge_batch(manifest: Manifest, frames: Sequence[np.ndarray]) -> tuple[np.ndarray, list[Any]]:
    """(N, 3, S, S) float32 written by the edge's LetterboxWriter with the manifest's
    preprocess, and each frame's placement (for mapping boxes back)."""
    pre = preprocess_of(manifest.input)
    writer = LetterboxWriter(pre.size, pre)
    batch = np.zeros((len(frames), 3, pre.size, pre.size), np.float32)
    plans = [writer.write(f, batch[i]) for i, f in enumerate(frames)]
    return batch, plans


def detect(
    run: Runner,
    manifest: Manifest,
    batch: np.ndarray,
    plans: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    """Each frame's boxes in its own pixels, as the edge decodes them."""
    layout = layout_of(manifest, manifest.input.height)
    out: list[FrameBoxes] = []
    for i in range(len(batch)):
        out.extend(decode_detections(layout, run(batch[i : i + 1]), [plans[i]], th))
    return out


def per_label(
    labels: Sequence[str], ref: Sequence[FrameBoxes], test: Sequence[FrameBoxes]
) -> tuple[LabelRecall, ...]:
    """Recall of the INT8 boxes per label the FP32 model found, most boxes first."""
    counts: dict[int, int] = {}
    for f in ref:
        for c in f.class_ids.tolist():
            counts[int(c)] = counts.get(int(c), 0) + 1
    rows = []
    for cid, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        hit = sum(match_count(_only(r, cid), _only(t, cid)) for r, t in zip(ref, test, strict=True))
        label = labels[cid] if 0 <= cid < len(labels) else str(cid)
        rows.append(LabelRecall(label, n, hit))
    return tuple(rows)


def _only(f: FrameBoxes, cid: int) -> FrameBoxes:
    keep = f.class_ids == cid
    return FrameBoxes(f.boxes[keep], f.scores[keep], f.class_ids[keep])


def _check_sources(req: SiteQuantizeRequest) -> None:
    if not req.calibration:
        raise ValueError("give --calibration: the site's own clips or folders of kept frames")
    if not req.held_out:
        raise ValueError("give --held-out: a clip the calibration does not see")
    for p in (*req.calibration, *req.held_out):
        if not p.exists():
            raise FileNotFoundError(f"{p} not found")
    cal = {p.resolve() for p in req.calibration}
    both = [str(p) for p in req.held_out if p.resolve() in cal]
    if both:
        raise ValueError(
            f"held-out {', '.join(both)} is also a calibration source: agreement must be "
            "measured on frames the calibration did not see; give another clip"
        )
    if req.threshold < 0.0:
        raise ValueError(f"--threshold must be at least 0, not {req.threshold}")


def quantize_for_site(
    repository: ModelRepository, req: SiteQuantizeRequest, into: ModelRepository | None = None
) -> SiteQuantizeReport:
    """Quantize, measure, and write the variant into `into` (default `repository`) only when
    box F1 reaches the threshold; QuantizeRefusedError (with the report) otherwise."""
    import onnx
    from strata.shared.machine import cpu_line

    _check_sources(req)
    manifest, _, src = repository.file_of(req.model)
    spec = detector_spec(manifest)  # ValueError for a classifier
    if manifest.precision != "fp32":
        raise ModelError(f"model {req.model!r}: quantize needs an fp32 primary file")
    engine = make_engine(req.engine, src, spec.outputs, req.threads)
    calib, _ = edge_batch(manifest, site_frames(req.calibration, req.calibration_frames))
    held, plans = edge_batch(manifest, site_frames(req.held_out, req.held_out_frames))
    th = Thresholds(req.score, req.iou, 300)
    fp32 = engine.fp32()
    ref = detect(fp32, manifest, held, plans, th)
    graph = onnx.load(str(src), load_external_data=False)
    convs = {n.name for n in graph.graph.node if n.op_type == "Conv"}
    attempts: list[Attempt] = []
    best: tuple[float, Any] | None = None
    for recipe in req.recipes:
        q = engine.quantize(calib, recipe, graph)
        test = detect(q.run, manifest, held, plans, th)
        a = box_agreement(ref, test)
        attempts.append(
            Attempt(
                recipe.name, q.kept, round(a.f1, 4), a.true_positives, a.false_positives,
                a.false_negatives, per_label(manifest.labels, ref, test),
                tuple(k for k in q.kept if k in convs),
            )
        )  # fmt: skip
        if best is None or a.f1 > best[0]:
            best = (a.f1, q)
        if a.f1 >= req.threshold:
            break
    assert best is not None
    fp32_fps, int8_fps = frames_per_second(fp32, best[1].run, held[:1], req.timing_runs)
    report = SiteQuantizeReport(
        model=req.model,
        engine=req.engine,
        engine_version=engine.version(),
        threshold=req.threshold,
        score=req.score,
        calibration=tuple(p.name for p in req.calibration),
        calibration_frames=len(calib),
        held_out=tuple(p.name for p in req.held_out),
        held_out_frames=len(held),
        reference_boxes=sum(len(f) for f in ref),
        fp32_fps=round(fp32_fps, 2),
        int8_fps=round(int8_fps, 2),
        attempts=tuple(attempts),
        machine=cpu_line(),
        notes=_notes(req, ref)
        + ((best[1].note,) if best[1].note else ())
        + _slower(fp32_fps, int8_fps, req.engine),
    )
    if not report.passed:
        raise QuantizeRefusedError(report)
    return _write(into or repository, repository, req, report, best[1])


def _slower(fp32_fps: float, int8_fps: float, engine: str) -> tuple[str, ...]:
    if int8_fps >= fp32_fps:
        return ()
    return (
        f"INT8 is slower than FP32 on {engine} here ({int8_fps:.1f} against {fp32_fps:.1f} "
        "frames/s): it agrees, but keep the FP32 model unless another CPU runs it faster",
    )


def _notes(req: SiteQuantizeRequest, ref: Sequence[FrameBoxes]) -> tuple[str, ...]:
    n = sum(len(f) for f in ref)
    if n < 50:
        return (f"only {n} FP32 boxes on the held-out frames: the F1 rests on few boxes",)
    return ()


def _write(
    target: ModelRepository,
    source: ModelRepository,
    req: SiteQuantizeRequest,
    report: SiteQuantizeReport,
    q: Any,
) -> SiteQuantizeReport:
    """The INT8 file(s) as variant `req.variant_key`, and the report beside them."""
    from dataclasses import replace

    from strata.tools.models.quantize import copy_model

    if target.root != source.root:
        copy_model(source, target, req.model)
    folder = target.folder(req.model)
    current = target.manifest(req.model)
    key = req.variant_key
    files = q.save(folder / f"{Path(current.file).stem}.{key}")
    variant = Variant(
        file=files[0].name,
        sha256=sha256_of(files[0]),
        format="onnx" if q.suffix == ".onnx" else "openvino",
        precision="int8",
        made_by=f"strata models quantize --engine {req.engine} ({report.engine_version}); "
        f"{report.best.recipe}; report {REPORT_FILE}",
        weights_sha256=sha256_of(files[1]) if len(files) > 1 else None,
    )
    save_manifest(
        current.model_copy(update={"variants": {**current.variants, key: variant}}), folder
    )
    done = replace(report, variant=key, files=tuple(f.name for f in files))
    (folder / REPORT_FILE).write_text(done.to_json() + "\n")
    return done
