"""The edge's run-time model version switches (the shared part: shared/models/switcher.py).

The edge supplies its builder (runner and detector of a version's file) and its canary:
the new detector on the node's most recent frames, scored against what the serving
version published for them (box F1 at IoU 0.5, same class; at least one frame with a
box). The worker swaps detectors when no batch is in flight.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from strata.edge.inference.detector import Detector
from strata.edge.ingest.frames import DecodedFrame
from strata.shared.config.edge import ModelVersionsConfig
from strata.shared.models import ModelRepository
from strata.shared.models import switcher as shared
from strata.shared.models.switcher import version_of
from strata.shared.runtime.staging import StagedRunner
from strata.shared.vision import FrameBoxes
from strata.shared.vision.agreement import agreement

__all__ = ["EdgeModel", "LoadedVersion", "ModelSwitcher", "VersionMetrics", "version_of"]

# Builds the runner and detector of a model file (the node's own recipe).
Builder = Callable[[Path], tuple[StagedRunner, Detector]]


@dataclass(frozen=True, slots=True)
class EdgeModel:
    """One version's runner and detector."""

    runner: StagedRunner
    detector: Detector

    def close(self) -> None:
        self.detector.close()
        self.runner.close()


LoadedVersion = shared.LoadedVersion[EdgeModel]


class VersionMetrics(shared.VersionMetrics):
    """The edge's version metrics (strata_edge_model_*)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(
            registry,
            "edge",
            "Box F1 of the last canary (new version vs serving, recent frames).",
        )


class ModelSwitcher(shared.VersionSwitcher[EdgeModel]):
    """Watches a repository model; canaries new detectors on the node's recent frames."""

    def __init__(
        self,
        repo: ModelRepository,
        name: str,
        serving: int,
        cfg: ModelVersionsConfig,
        build: Builder,
        metrics: VersionMetrics,
    ) -> None:
        self._recent: deque[tuple[DecodedFrame, FrameBoxes]] = deque(maxlen=cfg.canary_frames)
        self._lock = threading.Lock()
        self._frames = cfg.canary_frames

        def build_version(_version: int, path: Path) -> EdgeModel:
            return EdgeModel(*build(path))

        super().__init__(repo, name, serving, cfg, build_version, self._score, metrics, "edge")

    def remember(self, frames: tuple[DecodedFrame, ...], results: list[FrameBoxes]) -> None:
        """The serving version's answers, the canary's reference (worker thread)."""
        with self._lock:
            self._recent.extend(zip(frames, results, strict=True))

    def _score(self, model: EdgeModel) -> float | None:
        with self._lock:
            recent = list(self._recent)
        # Frames where nothing was found agree with any model that finds nothing:
        # the canary waits until the serving version found at least one object.
        if len(recent) < self._frames or not any(len(b) for _, b in recent):
            return None
        detector = model.detector
        ours: list[FrameBoxes] = []
        for i in range(0, len(recent), detector.max_batch):
            chunk = [f for f, _ in recent[i : i + detector.max_batch]]
            ours.extend(detector.finish(detector.launch(chunk, time.time_ns())))
        return agreement([b for _, b in recent], ours).f1
