"""Checkpoints of edge state: written every `checkpoint.interval_s` and at clean stop,
restored at start.

What a restarted (or standby) node needs to carry on where the last one stopped:

- cameras: per camera and sender session, the last sequence *published* (not merely
  received: a frame acked QUEUED but lost in the crash must be processed when its
  device resends it; one answered before the checkpoint is recognised as a duplicate);
- counters: every counter of the node's metrics (frames, drops by reason, per-camera
  frames, GPU-seconds and bytes), so totals and cost accounting continue;
- the uplink: how many crops the spool held (the spool file itself keeps the queue and
  its order; the checkpoint records the position to check it against at restore);
- the model version serving, and parts other modules register (`Checkpointer.register`,
  e.g. the tracker when the node runs one), each under its own name: JSON-able
  snapshots, restored when the part registers.

The file is JSON: {"sha256": hex of the body, "body": {...}}, written beside and renamed
after an fsync, so a crash mid-write leaves the previous checkpoint. A file that does not
parse, fails its checksum, or carries another format version is logged on one clear line
and ignored: the node starts clean, never crashes on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import Field, ValidationError
from strata.shared.config.base import StrictModel
from strata.shared.config.edge import CheckpointConfig

log = logging.getLogger(__name__)

FORMAT = "strata-edge-checkpoint"
VERSION = 1


class CameraCheckpoint(StrictModel):
    """One camera: the last sequence published per sender session (oldest session first)."""

    camera_id: str
    sessions: list[tuple[int, int]] = Field(default_factory=list)


class CounterCheckpoint(StrictModel):
    """One counter series: its family name, labels and total."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float = Field(ge=0.0)


class UplinkCheckpoint(StrictModel):
    """Where the uplink's queue stood: crops in the spool and in memory."""

    spooled: int = 0
    buffered: int = 0


class CheckpointBody(StrictModel):
    """Everything a checkpoint holds (see the module docstring)."""

    format: Literal["strata-edge-checkpoint"] = "strata-edge-checkpoint"
    version: int
    edge_id: str
    written_unix: float
    model: str = ""
    model_version: int = 0
    cameras: list[CameraCheckpoint] = Field(default_factory=list)
    counters: list[CounterCheckpoint] = Field(default_factory=list)
    uplink: UplinkCheckpoint = Field(default_factory=UplinkCheckpoint)
    parts: dict[str, Any] = Field(default_factory=dict)


class CheckpointPart(Protocol):
    """State another module keeps in the checkpoint (JSON-able), by name."""

    name: str

    def snapshot(self) -> Any: ...

    def restore(self, data: Any) -> None: ...


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says why."""


class PublishedSequences:
    """Last published sequence per (camera, session); the worker writes, forget() prunes."""

    def __init__(self, sessions_per_camera: int) -> None:
        self.sessions_per_camera = sessions_per_camera
        self._cams: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()

    def published(self, camera_id: str, session: int, sequence: int) -> None:
        with self._lock:
            cam = self._cams.get(camera_id)
            if cam is None:
                cam = self._cams[camera_id] = {}
            last = cam.pop(session, 0)
            cam[session] = max(last, sequence)  # most recent session last
            if len(cam) > self.sessions_per_camera:
                del cam[next(iter(cam))]

    def forget(self, camera_ids: list[str]) -> None:
        with self._lock:
            for cid in camera_ids:
                self._cams.pop(cid, None)

    def snapshot(self) -> list[CameraCheckpoint]:
        with self._lock:
            return [
                CameraCheckpoint(camera_id=cid, sessions=list(s.items()))
                for cid, s in self._cams.items()
            ]

    def restore(self, cameras: list[CameraCheckpoint]) -> None:
        with self._lock:
            for c in cameras:
                self._cams[c.camera_id] = dict(c.sessions)


def counter_values(counters: list[Counter]) -> list[CounterCheckpoint]:
    """Every series of these counters with its total."""
    out = []
    for counter in counters:
        for family in counter.collect():
            for s in family.samples:
                if s.name.endswith("_total") and s.value > 0:
                    out.append(CounterCheckpoint(name=family.name, labels=s.labels, value=s.value))
    return out


def restore_counters(counters: list[Counter], saved: list[CounterCheckpoint]) -> int:
    """Add the saved totals to these (fresh) counters; returns the series restored."""
    by_name = {c.describe()[0].name: c for c in counters}
    n = 0
    for s in saved:
        counter = by_name.get(s.name)
        if counter is None:
            continue  # a counter this build no longer has
        try:
            (counter.labels(**s.labels) if s.labels else counter).inc(s.value)
        except ValueError as exc:  # other label names than this build's
            log.warning("checkpoint: counter %s %s not restored: %s", s.name, s.labels, exc)
            continue
        n += 1
    return n


def write(path: Path, body: CheckpointBody) -> None:
    """Write atomically: beside, fsync, rename."""
    data = body.model_dump(mode="json")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    doc = json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "body": data})
    tmp = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(doc)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def read(path: Path) -> CheckpointBody:
    """The checkpoint's body; CheckpointError says what is wrong with the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        data, digest = doc["body"], doc["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"unreadable ({type(exc).__name__}: {exc})") from None
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if hashlib.sha256(text.encode()).hexdigest() != digest:
        raise CheckpointError("checksum mismatch (corrupt or edited)")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError("not an edge checkpoint")
    if data.get("version") != VERSION:
        raise CheckpointError(
            f"format version {data.get('version')!r}, this node reads version {VERSION}"
        )
    try:
        return CheckpointBody.model_validate(data)
    except ValidationError as exc:
        raise CheckpointError(f"invalid: {exc.errors()[0]['msg']}") from None


class CheckpointMetrics:
    """Checkpoints written, restored and refused."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.written = Counter(
            "strata_edge_checkpoints_written", "Checkpoints written.", registry=registry
        )
        self.restored = Gauge(
            "strata_edge_checkpoint_restored",
            "1 when this node started from a checkpoint, 0 when it started clean.",
            registry=registry,
        )
        self.refused = Counter(
            "strata_edge_checkpoints_refused",
            "Checkpoints found at start but not used (corrupt, other version).",
            registry=registry,
        )
        self.age = Gauge(
            "strata_edge_checkpoint_unixtime",
            "When the last checkpoint was written (or the one restored).",
            registry=registry,
        )


class Checkpointer:
    """Builds, writes and restores the node's checkpoint (see the module docstring)."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        edge_id: str,
        body: Callable[[], CheckpointBody],
        metrics: CheckpointMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg, self.edge_id, self._body, self.metrics = cfg, edge_id, body, metrics
        self.path = Path(cfg.path) if cfg.path else None
        self._clock = clock
        self._next = clock() + cfg.interval_s
        self.parts: list[CheckpointPart] = []
        self._restored_parts: dict[str, Any] = {}

    def register(self, part: CheckpointPart) -> bool:
        """Keep `part` in every checkpoint from now on; restores it at once from the
        checkpoint the node started from, if that holds it (True then)."""
        self.parts.append(part)
        data = self._restored_parts.pop(part.name, None)
        if data is None:
            return False
        try:
            part.restore(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("checkpoint part %s not restored (%s): it starts clean", part.name, exc)
            return False
        return True

    def with_parts(self, body: CheckpointBody) -> CheckpointBody:
        """`body` with the registered parts' snapshots."""
        if not self.parts:
            return body
        return body.model_copy(update={"parts": {p.name: p.snapshot() for p in self.parts}})

    def load(self) -> CheckpointBody | None:
        """The checkpoint to start from, or None (absent, or refused with a log line)."""
        if self.path is None or not self.path.exists():
            return None
        try:
            body = read(self.path)
        except CheckpointError as exc:
            self.metrics.refused.inc()
            bad = self.path.with_name(self.path.name + ".refused")
            try:
                self.path.replace(bad)
            except OSError:
                bad = self.path
            log.error(
                "checkpoint %s not used: %s; starting clean (the file is kept as %s)",
                self.path,
                exc,
                bad,
            )
            return None
        if body.edge_id != self.edge_id:
            log.warning(
                "checkpoint %s was written by edge %s: taking over its state as %s",
                self.path,
                body.edge_id,
                self.edge_id,
            )
        self.metrics.restored.set(1)
        self.metrics.age.set(body.written_unix)
        self._restored_parts = dict(body.parts)
        return body

    def tick(self) -> None:
        """Write when the interval is up (worker thread)."""
        if self.path is None or self._clock() < self._next:
            return
        self._next = self._clock() + self.cfg.interval_s
        self.save()

    def save(self) -> bool:
        """Write now; False (logged) when it cannot."""
        if self.path is None:
            return False
        body = self.with_parts(self._body())
        try:
            write(self.path, body)
        except OSError as exc:
            log.error("checkpoint %s not written: %s", self.path, exc)
            return False
        self.metrics.written.inc()
        self.metrics.age.set(body.written_unix)
        return True
