"""The checkpoint's body and its file (edge/state/checkpoint.py's module docstring says
what it holds and why): the typed models, the counters' totals, and the atomic,
checksummed JSON file that `Checkpointer` writes and reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Literal

from prometheus_client import Counter
from pydantic import Field, ValidationError
from strata.edge.flow.ledger import SettledRun, SettledStream
from strata.edge.tracking.tracker import TrackerState
from strata.shared.config.base import StrictModel

log = logging.getLogger(__name__)

FORMAT = "strata-edge-checkpoint"
# 2: settled runs and trackers instead of version 1's last-published watermarks.
VERSION = 2


class StreamCheckpoint(StrictModel):
    """One (sender session, camera): its settled frames as runs (first, last, status,
    reason), oldest first."""

    session_id: int
    camera_id: str
    runs: list[tuple[int, int, int, str]] = Field(default_factory=list)

    @classmethod
    def of(cls, s: SettledStream) -> StreamCheckpoint:
        return cls(
            session_id=s.session_id,
            camera_id=s.camera_id,
            runs=[(r.first, r.last, r.status, r.reason) for r in s.runs],
        )

    def settled(self) -> SettledStream:
        runs = tuple(SettledRun(a, b, st, why) for a, b, st, why in self.runs if a <= b)
        return SettledStream(self.session_id, self.camera_id, runs)


class TrackerCheckpoint(StrictModel):
    """One (sender session, camera)'s tracker."""

    session_id: int
    camera_id: str
    state: TrackerState


class CounterCheckpoint(StrictModel):
    """One counter series: its family name, labels and total."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float = Field(ge=0.0)


class UplinkCheckpoint(StrictModel):
    """Where the uplink's queue stood: its spool file, crops and track events in it and in
    memory."""

    spool_path: str = ""
    spooled: int = 0
    buffered: int = 0
    events_spooled: int = 0
    events_buffered: int = 0


class CheckpointBody(StrictModel):
    """Everything a checkpoint holds (see the module docstring)."""

    format: Literal["strata-edge-checkpoint"] = "strata-edge-checkpoint"
    version: int
    edge_id: str
    written_unix: float
    model: str = ""
    model_version: int = 0
    streams: list[StreamCheckpoint] = Field(default_factory=list)
    trackers: list[TrackerCheckpoint] = Field(default_factory=list)
    counters: list[CounterCheckpoint] = Field(default_factory=list)
    uplink: UplinkCheckpoint = Field(default_factory=UplinkCheckpoint)
    parts: dict[str, Any] = Field(default_factory=dict)


class Handover(StrictModel):
    """Cameras whose state `taken_by` restored from `edge_id`'s checkpoint written at
    `checkpoint_written_unix` (the file beside that checkpoint; see the module docstring)."""

    format: Literal["strata-edge-handover"] = "strata-edge-handover"
    edge_id: str
    checkpoint_written_unix: float
    taken_by: str
    cameras: list[str] = Field(default_factory=list)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says why."""


def counter_values(counters: list[Counter]) -> list[CounterCheckpoint]:
    """Every series of these counters with its total."""
    out = []
    for counter in counters:
        for family in counter.collect():
            for s in family.samples:
                if s.name.endswith("_total") and s.value > 0:
                    out.append(CounterCheckpoint(name=family.name, labels=s.labels, value=s.value))
    return out


def restore_counters(
    counters: list[Counter], saved: list[CounterCheckpoint], cameras: set[str] | None = None
) -> int:
    """Add the saved totals to these counters (all, or only the series labelled with one of
    `cameras`); returns the series restored."""
    by_name = {c.describe()[0].name: c for c in counters}
    n = 0
    for s in saved:
        if cameras is not None and s.labels.get("camera") not in cameras:
            continue
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


def write_atomic(path: Path, text: str) -> None:
    # Beside, fsync, rename: a crash mid-write leaves the previous file. A leading dot:
    # a half-written file never matches a glob of checkpoints or markers.
    tmp = path.with_name(f".{path.name}.part")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def write(path: Path, body: CheckpointBody) -> None:
    """Write atomically: beside, fsync, rename."""
    data = body.model_dump(mode="json")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    doc = json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "body": data})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, doc)


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
