"""A detector on a staged runner: preprocess into the slot's buffer, launch, decode on completion.

What the model expects (placement, channel order, normalisation) and how its outputs hold
the boxes come from its manifest (`DetectorSpec`); a bare ONNX file is read as YOLOv8.
"""

from __future__ import annotations

import ast
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from strata.edge.ingest.frames import DecodedFrame
from strata.shared.config.edge import DetectionConfig, EdgeConfig
from strata.shared.models.detector import DetectorSpec, yolov8_spec
from strata.shared.runtime import ModelLoadError, OpenVinoOptions, create_runner
from strata.shared.runtime.staging import HostStagedRunner, StagedRunner
from strata.shared.vision import (
    COCO80,
    FrameBoxes,
    Letterbox,
    LetterboxWriter,
    Thresholds,
    decode_detections,
)

log = logging.getLogger(__name__)

# Back ends with no CUDA device (no GPU telemetry, no device buffers).
CPU_BACKENDS = ("onnxruntime-cpu", "openvino")


@dataclass(frozen=True, slots=True)
class InFlight:
    """A launched batch: which slot holds it, its frames and how each was letterboxed."""

    slot: int
    frames: tuple[DecodedFrame, ...]
    letterboxes: tuple[Letterbox, ...]
    start_ns: int
    # time.monotonic() when preprocessing was done and the batch went to the runner.
    launched: float

    def elapsed(self) -> float:
        """Seconds since launch: copy-in, inference, copy-out (and any wait for the slot)."""
        return time.monotonic() - self.launched


def model_labels(path: Path, classes: int, configured: Sequence[str]) -> tuple[str, ...]:
    """Labels by class id: config, else the ONNX metadata `names` (ultralytics), else COCO.
    An OpenVINO IR (.xml) has no ONNX metadata: its labels come from its manifest."""
    if configured:
        if len(configured) != classes:
            raise ModelLoadError(
                f"{len(configured)} labels given for a model with {classes} classes ({path})"
            )
        return tuple(configured)
    try:
        if Path(path).suffix.lower() != ".onnx":
            raise ValueError("not an ONNX file, so no ONNX metadata")
        import onnx

        meta = {
            p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props
        }
        names = ast.literal_eval(meta["names"]) if "names" in meta else None
        if isinstance(names, dict) and len(names) == classes:
            return tuple(str(names[i]) for i in range(classes))
    except (OSError, ValueError, SyntaxError, KeyError) as exc:
        log.warning("cannot read labels from %s: %s", path, exc)
    if classes == len(COCO80):
        return COCO80
    return tuple(f"class{i}" for i in range(classes))


def cpu_streams(threads: int, streams: int) -> tuple[int, int]:
    """ONNX Runtime CPU: (streams, intra-op threads each) for `runtime.threads` and
    `runtime.cpu_streams`. 0: single-threaded streams, one more than the cores: a run
    preempted by the node's decode or tracking stalls only itself, not a parallel loop its
    peers spin at, and a core the worker frees finds a run waiting."""
    total = threads or os.cpu_count() or 1
    if streams == 0:
        streams = min(16, total + 1)
    if streams == 1:
        return 1, threads
    return streams, max(1, total // streams)


def open_staged(path: Path, cfg: EdgeConfig, max_batch: int, allocate: bool = True) -> StagedRunner:
    """The configured back end behind the staged interface; `allocate=False` builds the
    engine or session without batch buffers (a standby: `runner.allocate()` later)."""
    rt = cfg.runtime
    if rt.backend == "openvino":
        ov = create_runner(
            path,
            rt.backend,
            options=OpenVinoOptions(
                device=rt.openvino_device,
                precision=rt.openvino_precision,
                cache_dir=rt.openvino_cache,
                threads=rt.threads,
                streams=rt.openvino_streams,
            ),
            max_batch=max_batch,
            input_size=cfg.model.input_size,
            allocate=allocate,
        )
        if not isinstance(ov, StagedRunner):
            raise ModelLoadError("the openvino back end does not offer staged execution")
        return ov
    if rt.backend in CPU_BACKENDS:
        streams, threads = cpu_streams(rt.threads, rt.cpu_streams)
        runner = create_runner(path, rt.backend, threads=threads)
        shape = runner.inputs[0].shape
        size = cfg.model.input_size
        chw = (
            int(shape[1] or 3),
            int(shape[2] or size),
            int(shape[3] or size),
        )
        return HostStagedRunner(runner, max_batch, chw, slots=streams, allocate=allocate)
    staged = create_runner(
        path,
        rt.backend,
        device_id=rt.device_id,
        streams=rt.streams,
        fp16=rt.fp16,
        min_batch=rt.min_batch,
        opt_batch=rt.opt_batch,
        max_batch=max(rt.max_batch, max_batch),
        input_size=cfg.model.input_size,
        engine_cache=rt.engine_cache,
        workspace_mib=rt.workspace_mib,
        allocate=allocate,
    )
    if not isinstance(staged, StagedRunner):
        raise ModelLoadError(f"back end {rt.backend} does not offer staged execution")
    return staged


class Detector:
    """Preprocess a batch into a runner slot, launch it, and decode it when it is done."""

    def __init__(
        self,
        runner: StagedRunner,
        labels: Sequence[str],
        det: DetectionConfig,
        preprocess_threads: int = 1,
        spec: DetectorSpec | None = None,
    ) -> None:
        self.runner = runner
        self.labels = tuple(labels)
        self.det = det
        shape = runner.host_input(0).shape
        self.max_batch = int(shape[0])
        self.input_size = int(shape[2])
        if shape[2] != shape[3]:
            raise ModelLoadError(f"the detector needs a square input, got {shape[2]}x{shape[3]}")
        self.spec = spec or yolov8_spec(self.input_size, self.labels, classes=_yolo_classes(runner))
        if self.spec.preprocess.size != self.input_size:
            raise ModelLoadError(
                f"the manifest says input {self.spec.preprocess.size}, the model takes "
                f"{self.input_size}"
            )
        self.outputs = _output_indices(runner, self.spec.outputs)
        self.thresholds = Thresholds(det.score_threshold, det.iou_threshold, det.max_detections)
        self._pool = ThreadPoolExecutor(preprocess_threads) if preprocess_threads > 1 else None
        # A writer per thread: its scratch buffers must not be shared between threads.
        self._local = threading.local()
        self.letterbox = self._new_writer()

    def launch(self, frames: Sequence[DecodedFrame], start_ns: int) -> InFlight:
        """Letterbox every frame into a free slot's host buffer and launch the batch."""
        slot = self.runner.acquire()
        buf = self.runner.host_input(slot)
        if self._pool is None or len(frames) == 1:
            lbs = tuple(self.letterbox.write(f.image, buf[i]) for i, f in enumerate(frames))
        else:
            lbs = tuple(
                self._pool.map(
                    lambda i: self._writer().write(frames[i].image, buf[i]), range(len(frames))
                )
            )
        launched = time.monotonic()
        self.runner.launch(slot, len(frames))
        return InFlight(slot, tuple(frames), lbs, start_ns, launched)

    def finish(self, job: InFlight) -> list[FrameBoxes]:
        """Wait for a launched batch and decode its boxes in original frame pixels."""
        outputs = self.runner.wait(job.slot, len(job.frames))
        return decode_detections(
            self.spec.layout, [outputs[i] for i in self.outputs], job.letterboxes, self.thresholds
        )

    def _writer(self) -> LetterboxWriter:
        w: LetterboxWriter | None = getattr(self._local, "writer", None)
        if w is None:
            w = self._local.writer = self._new_writer()
        return w

    def _new_writer(self) -> LetterboxWriter:
        return LetterboxWriter(self.input_size, self.spec.preprocess)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    @property
    def classes(self) -> int:
        return len(self.labels)


def _output_indices(runner: StagedRunner, names: Sequence[str]) -> tuple[int, ...]:
    """Where each output the decoder reads sits in the runner's outputs (all, in order,
    when the spec names none)."""
    have = [o.name for o in runner.outputs]
    if not names:
        return tuple(range(len(have)))
    missing = [n for n in names if n not in have]
    if missing:
        raise ModelLoadError(
            f"the detector has no output {', '.join(map(repr, missing))} (it has: "
            f"{', '.join(have)}); fix output.names in its manifest"
        )
    return tuple(have.index(n) for n in names)


def _yolo_classes(runner: StagedRunner) -> int:
    """Classes of a YOLOv8 output [N, 4 + classes, anchors] when its shape says (else 0)."""
    shape = runner.outputs[0].shape if runner.outputs else ()
    return int(shape[1]) - 4 if len(shape) == 3 and shape[1] else 0
