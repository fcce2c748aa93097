"""The cloud's run-time classifier version switches (shared part: shared/models/switcher.py).

The cloud supplies its builder (a `Classifier` of a version's file, same input size as the
serving one, since queued crops are already resized to it) and its canary: the new version
on the most recent crops, scored as the share whose top-1 label matches the serving
version's. The batcher swaps classifiers between two batches (cloud/classify/batcher.py).
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry
from strata.shared.config.cloud import CloudModelConfig, CloudVersionsConfig
from strata.shared.models import ModelRepository
from strata.shared.models.switcher import LoadedVersion, VersionMetrics, VersionSwitcher
from strata.shared.runtime import ModelLoadError

from .classifier import Classifier, load_version

__all__ = ["ClassifierSwitcher", "LoadedVersion", "cloud_version_metrics"]


def cloud_version_metrics(registry: CollectorRegistry) -> VersionMetrics:
    """strata_cloud_model_*."""
    return VersionMetrics(
        registry,
        "cloud",
        "Share of recent crops where the last canary's top-1 label matched the serving one.",
    )


class ClassifierSwitcher(VersionSwitcher[Classifier]):
    """Watches the repository classifier; canaries new versions on recent crops."""

    def __init__(
        self,
        repo: ModelRepository,
        serving: Classifier,
        model: CloudModelConfig,
        cfg: CloudVersionsConfig,
        max_batch: int,
        metrics: VersionMetrics,
    ) -> None:
        self._model, self._size, self._max_batch = model, serving.size, max_batch
        self._crops = cfg.canary_crops
        # (model-sized crop, serving version's top-1 label); references, not copies.
        self._recent: deque[tuple[np.ndarray, str]] = deque(maxlen=cfg.canary_crops)
        self._lock = threading.Lock()
        super().__init__(
            repo, model.name, serving.version, cfg, self._build, self._score, metrics, "cloud"
        )

    def remember(self, images: list[np.ndarray], clf: Classifier, probs: np.ndarray) -> None:
        """A batch's crops and the serving version's answers (batcher thread)."""
        if clf.version != self.serving:
            return  # the old version's last batches, after a switch
        top1 = probs.argmax(axis=1)
        with self._lock:
            self._recent.extend(
                (img, clf.label(int(c))) for img, c in zip(images, top1, strict=True)
            )

    def _build(self, version: int, path: Path) -> Classifier:
        clf = load_version(self._model, self.repo, version, path, self._max_batch)
        if clf.size != self._size:
            clf.close()
            raise ModelLoadError(
                f"version {version} takes {clf.size}x{clf.size} crops, the serving one "
                f"{self._size}x{self._size}; a run-time switch keeps the input size"
            )
        if clf.fixed_batch is not None and clf.fixed_batch < self._max_batch:
            clf.close()
            raise ModelLoadError(
                f"version {version} runs batches of {clf.fixed_batch}, the batcher forms "
                f"up to {self._max_batch}"
            )
        return clf

    def _score(self, clf: Classifier) -> float | None:
        with self._lock:
            recent = list(self._recent)
        if len(recent) < self._crops:
            return None
        buffer = clf.new_buffer(self._max_batch)
        agree = 0
        for i in range(0, len(recent), buffer.max_batch):
            chunk = recent[i : i + buffer.max_batch]
            buffer.fill([img for img, _ in chunk])
            probs = clf.run(buffer, len(chunk))
            agree += sum(
                clf.label(int(c)) == label
                for c, (_, label) in zip(probs.argmax(axis=1), chunk, strict=True)
            )
        return agree / len(recent)
