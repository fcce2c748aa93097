"""Run-time model version switches, the part every tier shares.

A tier serves version V of a repository model. On a request (SIGHUP, admin) or every
`poll_s`, `poll()` looks for a newer version; a loader thread builds it beside the serving
one (nothing waits for it), then runs the tier's canary: the new model on the tier's recent
inputs, scored against what the serving version answered (the canary returns None while it
has too few inputs). At or above `canary_floor` the version is `ready()`; the tier swaps
models between two batches, so every input is answered by exactly one version and none is
dropped. A load failure, a canary below the floor or no canary inputs within
`canary_wait_s` closes the new version, keeps the old one serving (a rollback, counted by
reason) and remembers the version so it is not retried until a newer one appears.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from ..runtime import ModelLoadError
from .repository import ModelRepository

log = logging.getLogger(__name__)


class Closeable(Protocol):
    def close(self) -> None: ...


M = TypeVar("M", bound=Closeable)

# Builds a tier's model from a version's file: (version, path) -> model.
Builder = Callable[[int, Path], M]
# Scores a new model against the serving one on recent inputs: agreement in [0, 1], or
# None while there are too few recent inputs.
Canary = Callable[[M], "float | None"]


class VersionPolicy(Protocol):
    """The fields of a tier's `versions` config the switcher reads."""

    @property
    def poll_s(self) -> float: ...
    @property
    def canary_floor(self) -> float: ...
    @property
    def canary_wait_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class LoadedVersion(Generic[M]):
    """A version loaded beside the serving one, canary passed."""

    version: int
    path: Path
    model: M
    load_s: float
    agreement: float

    def close(self) -> None:
        self.model.close()


class VersionMetrics:
    """Serving version, load time, canary agreement, switches, rollbacks of one tier."""

    def __init__(self, registry: CollectorRegistry, tier: str, agreement_help: str) -> None:
        p = f"strata_{tier}_model"
        self.serving = Gauge(
            f"{p}_version", "Repository version of the model serving.", registry=registry
        )
        self.load_seconds = Gauge(
            f"{p}_load_seconds",
            "Time to load the last new version beside the serving one.",
            registry=registry,
        )
        self.agreement = Gauge(f"{p}_canary_agreement", agreement_help, registry=registry)
        self.switches = Counter(f"{p}_switches", "Version switches done.", registry=registry)
        self.rollbacks = Counter(
            f"{p}_rollbacks",
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


class VersionSwitcher(Generic[M]):
    """Watches a repository model and prepares newer versions (see the module docstring)."""

    def __init__(
        self,
        repo: ModelRepository,
        name: str,
        serving: int,
        cfg: VersionPolicy,
        build: Builder[M],
        canary: Canary[M],
        metrics: VersionMetrics,
        tier: str,
    ) -> None:
        self.repo, self.name, self.cfg, self.metrics = repo, name, cfg, metrics
        self._build, self._score, self._tier = build, canary, tier
        self.serving = serving
        metrics.serving.set(serving)
        self._poll_lock = threading.Lock()
        self._requested = threading.Event()
        self._stop = threading.Event()
        self._next_poll = time.monotonic() + cfg.poll_s
        self._loader: threading.Thread | None = None
        self._ready: LoadedVersion[M] | None = None
        self._failed: set[int] = set()

    def request(self) -> None:
        """Check the repository at the next poll (SIGHUP, admin)."""
        self._requested.set()

    def poll(self) -> None:
        """Start loading a newer version when it is time to look (cheap; any thread)."""
        now = time.monotonic()
        due = self.cfg.poll_s > 0 and now >= self._next_poll
        if not (due or self._requested.is_set()):
            return
        # Several serving threads may poll; one looks, the others go on serving.
        if not self._poll_lock.acquire(blocking=False):
            return
        try:
            if self._busy():
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
                target=self._load,
                args=(latest,),
                name=f"{self._tier}-version-load",
                daemon=True,
            )
            self._loader.start()
        finally:
            self._poll_lock.release()

    def _busy(self) -> bool:
        return (self._loader is not None and self._loader.is_alive()) or self._ready is not None

    def ready(self) -> LoadedVersion[M] | None:
        """A version that passed its canary, handed over once (the tier switches)."""
        with self._poll_lock:
            loaded, self._ready = self._ready, None
        return loaded

    def switched(self, loaded: LoadedVersion[M], old: int) -> None:
        """The tier now serves `loaded`."""
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
        loaded = self.ready()
        if loaded is not None:
            loaded.close()

    # -- loader thread ---------------------------------------------------------------------

    def _load(self, version: int) -> None:
        t0 = time.monotonic()
        try:
            _m, _key, path = self.repo.file_of(self.name, version=version)
            model = self._build(version, path)
        except (ModelLoadError, OSError) as exc:
            self._rollback(version, "load", f"cannot load: {exc}")
            return
        load_s = time.monotonic() - t0
        self.metrics.load_seconds.set(load_s)
        try:
            score = self._canary(model)
        except Exception as exc:  # a model that fails on real inputs fails its canary
            model.close()
            self._rollback(version, "canary", f"canary run failed: {exc}")
            return
        if score is None:
            model.close()
            self._rollback(version, "no_frames", "too few recent inputs to canary on")
            return
        self.metrics.agreement.set(score)
        if score < self.cfg.canary_floor:
            model.close()
            self._rollback(
                version,
                "canary",
                f"canary agreement {score:.3f} below the floor {self.cfg.canary_floor:.3f}",
            )
            return
        self._ready = LoadedVersion(version, path, model, load_s, score)

    def _canary(self, model: M) -> float | None:
        deadline = time.monotonic() + self.cfg.canary_wait_s
        while True:
            score = self._score(model)
            if score is not None:
                return score
            if time.monotonic() >= deadline or self._stop.wait(0.1):
                return None

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
