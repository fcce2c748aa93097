"""The device's run-time gate version switches (shared part: shared/models/switcher.py).

The device supplies its builder (a `RelevanceGate` of a version's file, with the serving
gate's classes and threshold) and its canary: the new version on the most recent gated
frames, scored as the share whose keep/drop decision matches the serving version's. The
gate worker swaps gates between two batches (device/worker.py).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter
from strata.shared.config.device import GateConfig, GateVersionsConfig
from strata.shared.models import ModelRepository
from strata.shared.models.switcher import LoadedVersion, VersionMetrics, VersionSwitcher

from .gate import RelevanceGate, load_gate_version

__all__ = ["GateSwitcher", "LoadedVersion", "device_version_metrics"]


def device_version_metrics(registry: CollectorRegistry) -> VersionMetrics:
    """strata_device_model_*."""
    return VersionMetrics(
        registry,
        "device",
        "Share of recent frames where the last canary's keep/drop matched the serving gate.",
    )


class GateSwitcher(VersionSwitcher[RelevanceGate]):
    """Watches the repository gate model; canaries new versions on recent frames."""

    def __init__(
        self,
        repo: ModelRepository,
        serving: RelevanceGate,
        gate: GateConfig,
        cfg: GateVersionsConfig,
        metrics: VersionMetrics,
        registry: CollectorRegistry,
    ) -> None:
        self._gate_cfg = gate
        self.gated = Counter(
            "strata_device_gate_version_frames",
            "Frames the relevance gate decided on, by gate version.",
            ["version"],
            registry=registry,
        )
        self._frames = cfg.canary_frames
        # (frame as gated, or its JPEG; serving version's keep); references, not copies.
        self._recent: deque[tuple[np.ndarray | bytes, bool]] = deque(maxlen=cfg.canary_frames)
        self._lock = threading.Lock()
        self._gated_by: dict[int, Any] = {}
        super().__init__(
            repo, gate.model, serving.version, cfg, self._build, self._score, metrics, "device"
        )

    def remember(
        self, images: Sequence[np.ndarray | bytes], gate: RelevanceGate, keep: np.ndarray
    ) -> None:
        """A batch's frames (BGR, or JPEG: decoded only when a canary runs) and the serving
        gate's decisions (the gate worker's thread, or a camera's for a gate that cannot
        drop: every kept frame, so the version's counter is looked up once per version,
        not per call)."""
        counter = self._gated_by.get(gate.version)
        if counter is None:
            counter = self._gated_by[gate.version] = self.gated.labels(str(gate.version))
        counter.inc(len(images))
        if gate.version != self.serving:
            return
        with self._lock:
            self._recent.extend(zip(images, keep.tolist(), strict=True))

    def _build(self, version: int, path: Path) -> RelevanceGate:
        return load_gate_version(self._gate_cfg, self.repo, version, path)

    def _score(self, gate: RelevanceGate) -> float | None:
        with self._lock:
            recent = list(self._recent)
        if len(recent) < self._frames:
            return None
        step = gate.cfg.max_batch
        agree = 0
        for i in range(0, len(recent), step):
            chunk = recent[i : i + step]
            keep = gate.decide(gate.score([_bgr(img) for img, _ in chunk]))
            agree += sum(bool(k) == old for k, (_, old) in zip(keep, chunk, strict=True))
        return agree / len(recent)


def _bgr(image: np.ndarray | bytes) -> np.ndarray:
    """A remembered frame as BGR (a JPEG is decoded)."""
    if isinstance(image, np.ndarray):
        return image
    import simplejpeg

    out: np.ndarray = simplejpeg.decode_jpeg(image, colorspace="BGR")
    return out
