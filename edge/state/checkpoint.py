"""Checkpoints of edge state: written every `checkpoint.interval_s` and at clean stop,
restored at start, and restored by a peer for the cameras that move to it when this edge
fails (docs/edge.md, "Checkpoints and takeover").

What a restarted node, or the peer taking over its cameras, needs to carry on:

- delivery: per (sender session, camera) every settled frame's final status (as runs of
  sequences), plus the settle journal (edge/state/journal.py) since the checkpoint: a resent
  frame that was already published is answered DUPLICATE, one held but never published
  is processed (a watermark could not tell these apart);
- trackers: each camera's tracker (edge/tracking/tracker.py), so track ids continue and never
  repeat;
- counters: every counter of the node's metrics (the per-camera series go with a camera
  to the peer that takes it over);
- the uplink: the spool file's path and how many crops and track events it held (the
  spool itself keeps the queue; a peer taking over drains a failed edge's spool, events
  included, into its own uplink);
- the model version serving.

Each stateful part registers a `CheckpointPart` (edge/state/parts.py has the node's:
streams, trackers, counters, uplink; these four keep their typed fields of the body,
any other part goes under `parts` by name, as the rules stage's `rules` does): the
checkpointer asks each for its snapshot when it writes, and hands each its saved state
when the node starts. A part that also
restores one camera moved here from a peer is a `MovablePart` (edge/state/takeover.py).

A peer that restores a failed edge's checkpoint for some cameras marks them handed over:
`<checkpoint>.handed-over.<peer id>` beside it, naming the checkpoint (its write time) and
the cameras. When the failed edge restarts from that same checkpoint it leaves those
cameras' counters to the peer (which carries them on), so a fleet-wide sum does not count
them twice; its first checkpoint after that no longer holds them, and the markers go.

The file (edge/state/checkpoint_file.py) is JSON: {"sha256": hex of the body, "body":
{...}}, written beside and renamed after an fsync, so a crash mid-write leaves the previous
checkpoint. A file that does not
parse, fails its checksum, or carries another format version is logged on one clear line
and ignored: the node (or the cameras taken over) start clean, never crash on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import ValidationError
from strata.edge.flow.ledger import SettledStream
from strata.edge.state.checkpoint_file import (
    VERSION,
    CheckpointBody,
    CheckpointError,
    Handover,
    read,
    write,
    write_atomic,
)
from strata.edge.state.journal import JournalRead, SettleJournal, read_journal
from strata.shared.config.edge import CheckpointConfig
from strata.shared.fsnames import path_component

log = logging.getLogger(__name__)


class CheckpointPart(Protocol):
    """State a module keeps in the checkpoint, by name: JSON-able, or the typed field of
    the body named like the part (see BUILTIN). `restore` may return what it restored,
    for the log line."""

    name: str

    def snapshot(self) -> Any: ...

    def restore(self, data: Any) -> object: ...


@runtime_checkable
class MovablePart(CheckpointPart, Protocol):
    """A part that also restores one camera from a peer's checkpoint (takeover): `data`
    as `restore` gets it, but the peer's; returns what it restored (a count)."""

    def take_over(self, data: Any, camera: str, peer: str) -> int: ...


# Parts whose state is a typed field of the body (by the part's name). What `restore`
# gets: streams, the SettledStreams of the checkpoint and then of its journal; the
# others, the field as written.
BUILTIN = ("streams", "trackers", "counters", "uplink")


class CheckpointMetrics:
    """Checkpoints written, restored and refused; cameras taken over from peers."""

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
            "Checkpoints found but not used (corrupt, other version, other edge).",
            registry=registry,
        )
        self.age = Gauge(
            "strata_edge_checkpoint_unixtime",
            "When the last checkpoint was written (or the one restored).",
            registry=registry,
        )
        self.taken_over = Counter(
            "strata_edge_takeover_cameras",
            "Cameras moved here from another edge, by what was restored (checkpoint: its "
            "state; none: the peer left no checkpoint; refused: the peer's was unusable).",
            ["result"],
            registry=registry,
        )
        self.taken_over_frames = Counter(
            "strata_edge_takeover_settled_frames",
            "Settled frames of cameras taken over, restored from peers' checkpoints and "
            "journals (their resends are answered with their final status).",
            registry=registry,
        )
        self.adopted_crops = Counter(
            "strata_edge_takeover_crops",
            "Crops moved from a failed peer's uplink spool into this edge's uplink.",
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class PeerState:
    """What a peer's checkpoint and journal hold for some cameras."""

    edge_id: str
    body: CheckpointBody
    streams: list[SettledStream]
    journal_frames: int


def checkpoint_path(cfg: CheckpointConfig, edge_id: str) -> Path | None:
    """Where an edge's checkpoint lives: `path`, or <dir>/<edge id>.checkpoint.json."""
    if cfg.path:
        return Path(cfg.path)
    if cfg.dir:
        return Path(cfg.dir) / f"{path_component(edge_id)}.checkpoint.json"
    return None


def journal_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + ".journal")


def handover_path(checkpoint: Path, taken_by: str) -> Path:
    """The marker of the cameras `taken_by` took over from this checkpoint."""
    return checkpoint.with_name(f"{checkpoint.name}.handed-over.{path_component(taken_by)}")


class Checkpointer:
    """Builds, writes and restores the node's checkpoint, keeps its settle journal, and
    reads peers' (see the module docstring)."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        edge_id: str,
        header: Callable[[], CheckpointBody],
        metrics: CheckpointMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `header`: the body before the parts' snapshots (edge, time, model).
        self.cfg, self.edge_id, self._body, self.metrics = cfg, edge_id, header, metrics
        self.path = checkpoint_path(cfg, edge_id)
        self._clock = clock
        self._next = clock() + cfg.interval_s
        self.parts: list[CheckpointPart] = []
        self._restored_parts: dict[str, Any] = {}
        self._restored_from: CheckpointBody | None = None
        self.journal: SettleJournal | None = None
        # Peers' parsed checkpoint and journal, by edge id, with the files' (mtime, size).
        self._peers: dict[str, tuple[Any, CheckpointBody, JournalRead]] = {}
        # Cameras this node took over, by peer: (the peer checkpoint's write time, cameras).
        self._handed: dict[str, tuple[float, set[str]]] = {}
        # Markers of cameras taken from the checkpoint this node started from: removed once
        # a checkpoint of its own (without those cameras' counters) is written.
        self._consumed: list[Path] = []

    def register(self, part: CheckpointPart) -> bool:
        """Keep `part` in every checkpoint from now on; restores it at once from the
        checkpoint the node started from, if that holds it (True then)."""
        return self._register(part) is not None

    def _register(self, part: CheckpointPart) -> object | None:
        self.parts.append(part)
        data = self._restored_parts.pop(part.name, None)
        if data is None:
            return None
        try:
            done = part.restore(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("checkpoint part %s not restored (%s): it starts clean", part.name, exc)
            return None
        return "restored" if done is None else done

    def register_all(self, parts: list[CheckpointPart]) -> None:
        """Register the node's parts; one line says what the checkpoint restored."""
        body = self._restored_from
        done = {p.name: self._register(p) for p in parts}
        if body is None:
            return
        log.warning(
            "restored checkpoint of edge %s written %s: %s; model %s version %d then",
            body.edge_id,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(body.written_unix)),
            ", ".join(f"{name} {what}" for name, what in done.items() if what is not None),
            body.model,
            body.model_version,
        )

    def with_parts(self, body: CheckpointBody) -> CheckpointBody:
        """`body` with the registered parts' snapshots."""
        if not self.parts:
            return body
        typed = {p.name: p.snapshot() for p in self.parts if p.name in BUILTIN}
        others = {p.name: p.snapshot() for p in self.parts if p.name not in BUILTIN}
        return body.model_copy(update={**typed, "parts": others})

    def movable(self) -> list[MovablePart]:
        """The registered parts that also restore a camera moved here (takeover)."""
        return [p for p in self.parts if isinstance(p, MovablePart)]

    def peer_parts(self, state: PeerState, camera: str) -> dict[str, Any]:
        """What each part's `take_over` gets of a peer's state for `camera`: the built-in
        parts' share of it, any other part's whole snapshot (it picks the camera)."""
        body = state.body
        return {
            **body.parts,
            "streams": state.streams,
            "trackers": [t for t in body.trackers if t.camera_id == camera],
            "counters": body.counters,
            "uplink": body.uplink,
        }

    def load(self) -> tuple[CheckpointBody, list[SettledStream]] | None:
        """The checkpoint to start from and the frames its journal settled after it, or
        None (absent, or refused with a log line); the parts registered next restore from
        it. Opens the journal for this life."""
        restored = self._load()
        if self.path is not None and self.cfg.journal:
            # Only now: the previous life's journal was read (or refused) above.
            self.journal = SettleJournal(journal_path(self.path))
        if restored is not None:
            body, journal = restored
            self._restored_from = body
            self._restored_parts = {
                **body.parts,
                "streams": [st.settled() for st in body.streams] + journal,
                "trackers": body.trackers,
                "counters": body.counters,
                "uplink": body.uplink,
            }
            if journal:
                log.warning(
                    "checkpoint %s: its journal settled %d frame(s) after it",
                    self.path,
                    sum(r.last - r.first + 1 for st in journal for r in st.runs),
                )
        return restored

    def _load(self) -> tuple[CheckpointBody, list[SettledStream]] | None:
        if self.path is None:
            return None
        jpath = journal_path(self.path)
        if not self.path.exists():
            if jpath.exists() and jpath.stat().st_size:
                # Settled frames with no checkpoint under them (killed before the first
                # one): the journal alone still says which frames were published.
                j = read_journal(jpath)
                log.warning(
                    "no checkpoint at %s but its journal holds %d settled frame(s): restored",
                    self.path,
                    j.frames,
                )
                return self._empty_body(), j.streams
            return None
        try:
            body = read(self.path)
        except CheckpointError as exc:
            self.metrics.refused.inc()
            bad = self.path.with_name(self.path.name + ".refused")
            try:
                self.path.replace(bad)
                if jpath.exists():
                    jpath.replace(jpath.with_name(jpath.name + ".refused"))
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
        body = self._without_handed_over(body)
        journal = read_journal(jpath) if self.cfg.journal else JournalRead([], 0, 0)
        if journal.bad_lines:
            log.warning("journal %s: %d unreadable line(s) skipped", jpath, journal.bad_lines)
        self.metrics.restored.set(1)
        self.metrics.age.set(body.written_unix)
        return body, journal.streams

    def _without_handed_over(self, body: CheckpointBody) -> CheckpointBody:
        """`body` less the counters of cameras peers took over from this very checkpoint
        (they carry them on); markers of an older checkpoint are stale and just go."""
        assert self.path is not None
        cameras: dict[str, list[str]] = {}
        for marker in sorted(self.path.parent.glob(f"{self.path.name}.handed-over.*")):
            self._consumed.append(marker)
            try:
                h = Handover.model_validate_json(marker.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValidationError) as exc:
                log.error("handover marker %s not used (%s)", marker, type(exc).__name__)
                continue
            if h.edge_id != body.edge_id or h.checkpoint_written_unix != body.written_unix:
                log.info("handover marker %s is of another checkpoint: ignored", marker)
                continue
            cameras[h.taken_by] = h.cameras
        gone = {c for cams in cameras.values() for c in cams}
        if not gone:
            return body
        kept = [c for c in body.counters if c.labels.get("camera") not in gone]
        log.warning(
            "checkpoint %s: camera(s) %s were taken over from it by %s: their %d counter "
            "series stay with the edge(s) that carry them on, not restored here",
            self.path,
            ", ".join(sorted(gone)),
            ", ".join(sorted(cameras)),
            len(body.counters) - len(kept),
        )
        return body.model_copy(update={"counters": kept})

    def mark_handed_over(self, peer: str, written_unix: float, camera: str) -> None:
        """Mark `camera` as taken over from `peer`'s checkpoint written at `written_unix`
        (a marker beside it), so that `peer` does not restore its counters again when it
        restarts from that checkpoint. A marker that cannot be written is logged."""
        if not self.cfg.dir or not written_unix:
            return
        at, cameras = self._handed.get(peer, (written_unix, set()))
        if at != written_unix:  # the peer wrote a newer checkpoint since: a new marker
            cameras = set()
        cameras.add(camera)
        self._handed[peer] = (written_unix, cameras)
        marker = Handover(
            edge_id=peer,
            checkpoint_written_unix=written_unix,
            taken_by=self.edge_id,
            cameras=sorted(cameras),
        )
        peer_path = Path(self.cfg.dir) / f"{path_component(peer)}.checkpoint.json"
        path = handover_path(peer_path, self.edge_id)
        try:
            write_atomic(path, marker.model_dump_json())
        except OSError as exc:
            log.error(
                "cannot mark camera %s handed over at %s (%s): if edge %s restarts from that "
                "checkpoint it counts the camera's frames again",
                camera,
                path,
                exc.strerror or exc,
                peer,
            )

    def _empty_body(self) -> CheckpointBody:
        return CheckpointBody(version=VERSION, edge_id=self.edge_id, written_unix=time.time())

    def load_peer(self, edge_id: str, cameras: set[str]) -> PeerState | None:
        """What a peer's checkpoint and journal in the shared directory hold for
        `cameras`; None when it left none. PeerCheckpointError (counted) when its
        checkpoint cannot be used. Parsed once per version of the files, so the cameras
        of one failed edge cost one read."""
        if not self.cfg.dir:
            return None
        path = Path(self.cfg.dir) / f"{path_component(edge_id)}.checkpoint.json"
        jpath = journal_path(path)
        key = (_stat(path), _stat(jpath))
        if key == (None, None):
            return None
        cached = self._peers.get(edge_id)
        if cached is None or cached[0] != key:
            try:
                if key[0] is not None:
                    body = read(path)
                    if body.edge_id != edge_id:
                        raise CheckpointError(f"written by edge {body.edge_id!r}, not {edge_id!r}")
                else:
                    body = CheckpointBody(version=VERSION, edge_id=edge_id, written_unix=0.0)
            except CheckpointError as exc:
                self.metrics.refused.inc()
                raise PeerCheckpointError(f"checkpoint {path} of edge {edge_id}: {exc}") from None
            cached = (key, body, read_journal(jpath))
            self._peers[edge_id] = cached
        _, body, journal = cached
        streams = [s.settled() for s in body.streams if s.camera_id in cameras]
        streams += [s for s in journal.streams if s.camera_id in cameras]
        # The journal holds one run per frame.
        frames = sum(len(s.runs) for s in journal.streams if s.camera_id in cameras)
        return PeerState(edge_id, body, streams, frames)

    def tick(self) -> None:
        """Write when the interval is up (worker thread); flush the journal otherwise."""
        if self.path is None:
            return
        if self._clock() < self._next:
            if self.journal is not None:
                self.journal.flush()
            return
        self._next = self._clock() + self.cfg.interval_s
        self.save()

    def events_emitted(self) -> None:
        """A frame caused track events (already on the durable uplink), before its ack: with
        `checkpoint.on_events`, write now. The journal marks frames settled, so a restart
        never replays them: rules state older than the events it emitted would derive them
        again under other keys (a second end event of one track)."""
        if self.cfg.on_events:
            self.save()

    def settled(self, session_id: int, camera_id: str, seq: int, status: int, why: str) -> None:
        """A frame's final status (after its result was published): into the journal."""
        if self.journal is not None:
            self.journal.add(session_id, camera_id, seq, status, why)

    def save(self) -> bool:
        """Write now; False (logged) when it cannot. The journal starts over after it."""
        if self.path is None:
            return False
        body = self.with_parts(self._body())
        try:
            write(self.path, body)
        except OSError as exc:
            log.error("checkpoint %s not written: %s", self.path, exc)
            if self.journal is not None:
                self.journal.flush()  # the journal still covers what the file does not
            return False
        if self.journal is not None:
            self.journal.reset()
        for marker in self._consumed:  # this checkpoint supersedes the one they mark
            try:
                marker.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("handover marker %s not removed: %s", marker, exc.strerror or exc)
        self._consumed = []
        self.metrics.written.inc()
        self.metrics.age.set(body.written_unix)
        return True

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class PeerCheckpointError(CheckpointError):
    """A peer's checkpoint that cannot be used; the message names it and says why."""
