"""Run-time model version switches: load beside, canary, switch between batches, roll back.

The node serves version V of a repository model. On SIGHUP (`request()`) or every
`versions.poll_s`, `poll()` looks for a newer version; a loader thread builds its runner
and detector beside the serving ones (no frame waits for it), then runs the canary: the
new detector on the node's most recent frames, scored against what the serving version
published for them (box F1 at IoU 0.5, same class; at least one frame with a box). At or
above `canary_floor` the version is `ready()`; the worker swaps detectors when no batch
is in flight, so every frame is answered by exactly one version and none is dropped. A
load failure, a canary below the floor or no canary frames within `canary_wait_s`
closes the new version, keeps the old one serving (a rollback, counted by reason) and
remembers the version so it is not retried until a newer one appears.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from strata.shared.config.edge import ModelVersionsConfig
from strata.shared.models import ModelRepository
from strata.shared.runtime import ModelLoadError
from strata.shared.runtime.staging import StagedRunner
from strata.shared.vision import FrameBoxes
from strata.shared.vision.agreement import agreement

from .detector import Detector
from .frames import DecodedFrame

log = logging.getLogger(__name__)

# Builds the runner and detector of a model file (the node's own recipe).
Builder = Callable[[Path], tuple[StagedRunner, Detector]]


@dataclass(frozen=True, slots=True)
class LoadedVersion:
    """A version loaded beside the serving one, canary passed."""

    version: int
    path: Path
    runner: StagedRunner
    detector: Detector
    load_s: float
    agreement: float

    def close(self) -> None:
        self.detector.close()
        self.runner.close()


class VersionMetrics:
    """Serving version, load time, canary agreement, switches, rollbacks."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.serving = Gauge(
            "strata_edge_model_version",
            "Repository version of the model serving.",
            registry=registry,
        )
        self.load_seconds = Gauge(
            "strata_edge_model_load_seconds",
            "Time to load the last new version beside the serving one.",
            registry=registry,
        )
        self.agreement = Gauge(
            "strata_edge_model_canary_agreement",
            "Box F1 of the last canary (new version vs serving, recent frames).",
            registry=registry,
        )
        self.switches = Counter(
            "strata_edge_model_switches", "Version switches done.", registry=registry
        )
        self.rollbacks = Counter(
            "strata_edge_model_rollbacks",
            "New versions not switched to, by reason (load, canary, no_frames).",
            ["reason"],
            registry=registry,
        )


def version_of(repo: ModelRepository, name: str, path: Path) -> int:
    """The version whose folder holds `path` (0: the model's folder or elsewhere)."""
    parent = path.resolve().parent
    for v in repo.versions(name):
        if repo.version_folder(name, v).resolve() == parent:
            return v
    return 0


class ModelSwitcher:
    """Watches a repository model and prepares newer versions (see the module docstring)."""

    def __init__(
        self,
        repo: ModelRepository,
        name: str,
        serving: int,
        cfg: ModelVersionsConfig,
        build: Builder,
        metrics: VersionMetrics,
    ) -> None:
        self.repo, self.name, self.cfg, self.build, self.metrics = repo, name, cfg, build, metrics
        self.serving = serving
        metrics.serving.set(serving)
        self._recent: deque[tuple[DecodedFrame, FrameBoxes]] = deque(maxlen=cfg.canary_frames)
        self._lock = threading.Lock()
        self._requested = threading.Event()
        self._stop = threading.Event()
        self._next_poll = time.monotonic() + cfg.poll_s
        self._loader: threading.Thread | None = None
        self._ready: LoadedVersion | None = None
        self._failed: set[int] = set()

    def request(self) -> None:
        """Check the repository at the next poll (SIGHUP, admin)."""
        self._requested.set()

    def remember(self, frames: tuple[DecodedFrame, ...], results: list[FrameBoxes]) -> None:
        """The serving version's answers, the canary's reference (worker thread)."""
        with self._lock:
            self._recent.extend(zip(frames, results, strict=True))

    def poll(self) -> None:
        """Start loading a newer version when it is time to look (worker thread, cheap)."""
        now = time.monotonic()
        due = self.cfg.poll_s > 0 and now >= self._next_poll
        if not (due or self._requested.is_set()) or self._busy():
            return
        self._requested.clear()
        self._next_poll = now + self.cfg.poll_s
        try:
            latest = self.repo.latest_version(self.name)
        except OSError as exc:
            log.warning("model %s: cannot read the repository: %s", self.name, exc)
            return
        if latest == self.serving or latest in self._failed:
            return
        self._loader = threading.Thread(
            target=self._load, args=(latest,), name="edge-version-load", daemon=True
        )
        self._loader.start()

    def _busy(self) -> bool:
        return (self._loader is not None and self._loader.is_alive()) or self._ready is not None

    def ready(self) -> LoadedVersion | None:
        """A version that passed its canary, handed over once (the worker switches)."""
        if self._ready is None:
            return None
        loaded, self._ready = self._ready, None
        return loaded

    def switched(self, loaded: LoadedVersion, old: int) -> None:
        """The worker now serves `loaded`."""
        self.serving = loaded.version
        self.metrics.serving.set(loaded.version)
        self.metrics.switches.inc()
        log.warning(
            "model %s: switched from version %d to %d between batches (load %.2f s, canary "
            "agreement %.3f)",
            self.name,
            old,
            loaded.version,
            loaded.load_s,
            loaded.agreement,
        )

    def stop(self) -> None:
        """Stop a loader and release a version not yet switched to."""
        self._stop.set()
        if self._loader is not None:
            self._loader.join(timeout=30)
        if self._ready is not None:
            self._ready.close()
            self._ready = None

    # -- loader thread ---------------------------------------------------------------------

    def _load(self, version: int) -> None:
        t0 = time.monotonic()
        try:
            _m, _key, path = self.repo.file_of(self.name, version=version)
            runner, detector = self.build(path)
        except (ModelLoadError, OSError) as exc:
            self._rollback(version, "load", f"cannot load: {exc}")
            return
        load_s = time.monotonic() - t0
        self.metrics.load_seconds.set(load_s)
        loaded = LoadedVersion(version, path, runner, detector, load_s, 0.0)
        try:
            score = self._canary(detector)
        except Exception as exc:  # a model that fails on real frames fails its canary
            loaded.close()
            self._rollback(version, "canary", f"canary run failed: {exc}")
            return
        if score is None:
            loaded.close()
            self._rollback(version, "no_frames", f"no {self.cfg.canary_frames} frames to canary on")
            return
        self.metrics.agreement.set(score)
        if score < self.cfg.canary_floor:
            loaded.close()
            self._rollback(
                version,
                "canary",
                f"canary agreement {score:.3f} below the floor {self.cfg.canary_floor:.3f}",
            )
            return
        self._ready = LoadedVersion(version, path, runner, detector, load_s, score)

    def _canary(self, detector: Detector) -> float | None:
        deadline = time.monotonic() + self.cfg.canary_wait_s
        while True:
            with self._lock:
                recent = list(self._recent)
            # Frames where nothing was found agree with any model that finds nothing:
            # the canary waits until the serving version found at least one object.
            if len(recent) >= self.cfg.canary_frames and any(len(b) for _, b in recent):
                break
            if time.monotonic() >= deadline or self._stop.wait(0.1):
                return None
        ours: list[FrameBoxes] = []
        for i in range(0, len(recent), detector.max_batch):
            chunk = [f for f, _ in recent[i : i + detector.max_batch]]
            ours.extend(detector.finish(detector.launch(chunk, time.time_ns())))
        return agreement([b for _, b in recent], ours).f1

    def _rollback(self, version: int, reason: str, why: str) -> None:
        self._failed.add(version)
        self.metrics.rollbacks.labels(reason).inc()
        log.error(
            "model %s: version %d not switched to, version %d keeps serving: %s",
            self.name,
            version,
            self.serving,
            why,
        )
