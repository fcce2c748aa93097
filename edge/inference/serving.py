"""The model serving now: its runner and detector, and switches to another version.

Inference launches on `detector`; publish names `name` and `version` in results. A
repository model may switch versions at run time (edge/inference/versions.py): the worker
asks `switch_if_ready` between two batches, when nothing is in flight on the old runner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from strata.edge.inference.detector import Detector, open_staged
from strata.edge.inference.versions import ModelSwitcher
from strata.edge.ingest.frames import DecodedFrame
from strata.shared.config.edge import EdgeConfig
from strata.shared.runtime import ModelLoadError
from strata.shared.runtime.staging import StagedRunner
from strata.shared.vision import FrameBoxes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Which model a node serves at start: its name, file and repository version."""

    name: str
    path: Path
    version: int = 0


class ServingModel:
    """Runner and detector in service, the batch they take, and version switches."""

    def __init__(
        self,
        model: ModelIdentity,
        detector: Detector,
        max_batch: int,
        switcher: ModelSwitcher | None = None,
    ) -> None:
        self.name = model.name
        self.path = model.path
        self.version = model.version
        self.detector = detector
        self.runner: StagedRunner = detector.runner
        self.max_batch = max_batch
        self.switcher = switcher

    @property
    def labels(self) -> tuple[str, ...]:
        return self.detector.labels

    def poll(self, idle: bool) -> None:
        """Let the switcher look for versions; serve a loaded one from the next batch on
        when `idle` (worker thread, nothing in flight)."""
        if self.switcher is None:
            return
        self.switcher.poll()
        loaded = self.switcher.ready() if idle else None
        if loaded is None:
            return
        old_runner, old_detector, old = self.runner, self.detector, self.version
        self.runner, self.detector = loaded.model.runner, loaded.model.detector
        self.path, self.version = loaded.path, loaded.version
        self.switcher.switched(loaded, old)
        old_detector.close()
        old_runner.close()

    def remember(self, frames: tuple[DecodedFrame, ...], results: list[FrameBoxes]) -> None:
        """The serving version's answers, the reference a new version is canaried on."""
        if self.switcher is not None:
            self.switcher.remember(frames, results)

    def close(self) -> None:
        self.detector.close()
        self.runner.close()


class VersionBuilder:
    """Builds runner and detector of another version of the serving model (loader
    thread): same classes and labels, at least the batch served."""

    def __init__(self, cfg: EdgeConfig, first: Detector, max_batch: int) -> None:
        self.cfg = cfg
        self.labels = first.labels
        self.classes = first.classes
        self.spec = first.spec
        self.max_batch = max_batch

    def __call__(self, path: Path) -> tuple[StagedRunner, Detector]:
        runner = open_staged(path, self.cfg, self.cfg.batching.max_batch)
        try:
            classes = self.classes if self.spec.layout.format != "yolov8" else classes_of(runner)
            if classes != self.classes:
                raise ModelLoadError(
                    f"{path}: {classes} classes, the serving version has {self.classes}"
                )
            det = Detector(
                runner,
                self.labels,
                self.cfg.detection,
                self.cfg.runtime.preprocess_threads,
                self.spec,
            )
            if det.max_batch < self.max_batch:
                det.close()
                raise ModelLoadError(f"{path}: takes {det.max_batch} frames, not {self.max_batch}")
        except BaseException:
            runner.close()
            raise
        return runner, det


def classes_of(runner: StagedRunner) -> int:
    """Classes of a YOLO output [N, 4 + classes, anchors]; a dummy run when dynamic."""
    out_shape = runner.outputs[0].shape
    classes = (out_shape[1] or 0) - 4 if len(out_shape) == 3 else 0
    if classes > 0:
        return classes
    slot = runner.acquire()
    runner.host_input(slot)[:1] = 0
    runner.launch(slot, 1)
    out = runner.wait(slot, 1)[0]
    if out.ndim != 3 or out.shape[1] < 5:
        raise ModelLoadError(f"not a YOLO detection output: shape {out.shape}")
    return int(out.shape[1]) - 4
