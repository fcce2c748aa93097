"""The clip demand: which tracks each camera's device should be cutting clips of.

Per camera, the demand is its live tracks (track_uid, capture time of their first
position, end 0) and the tracks that ended within `edge.clips.keep_ended_s` of the
camera's latest frame (with the capture time of their last position), read off the
lifecycle events (NEW, END) the rules stage puts on each frame: this stage runs after it
(strata.edge.tracking.handoff). It is state, not deltas: the whole of it rides a camera's
QUEUED acks (`FrameAck.clips`, `clips_set`; `decorate`, on the ingest thread) when it
changed since that device session last heard it, on a session's first ack and again
every `resend_s`, so a lost ack loses nothing. At most `max_tracks` per camera go out:
live tracks first, then the ended, the most recent first of each; the rest are counted
(strata_edge_clip_demand_cut_total).

Durability: a checkpoint part (`clip_demand`) of the same checkpoint as the rules' state,
updated before it is written (this stage sees a frame's events before publish writes the
checkpoint for them, `checkpoint.on_events`): after a kill -9 the demand is restored as
the rules' tracks are, so a track the restored rules hold live is live here too and its
end reaches the device. A camera taken over from a peer brings its demand along.

Threads: the stage runs on the worker thread, `decorate` on the ingest thread, a
checkpoint on either: one lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strata.edge.metrics import EdgeMetrics
from strata.edge.tracking.handoff import AnsweredFrame, TrackedFrame
from strata.shared.config.edge import EdgeClipsConfig
from strata.shared.contracts import events_pb2, frame_pb2

log = logging.getLogger(__name__)

NEW = events_pb2.TRACK_EVENT_TYPE_NEW
END = events_pb2.TRACK_EVENT_TYPE_END
# Device sessions of one camera whose last sent demand is remembered (a restarted agent
# is a new session; the oldest is forgotten).
SESSIONS_PER_CAMERA = 4


@dataclass(slots=True)
class _Camera:
    """One camera's tracks (uid -> [start_ns, end_ns], insertion order) and the version
    of that state; `sent`: per device session, (version, monotonic time) last sent."""

    tracks: dict[str, list[int]] = field(default_factory=dict)
    version: int = 1
    sent: dict[int, tuple[int, float]] = field(default_factory=dict)
    message: list[frame_pb2.ClipDemand] | None = None  # built once per version
    cut: set[str] = field(default_factory=set)  # tracks left out (over max_tracks)


class ClipDemand:
    """A `TrackedStage` keeping every camera's clip demand, the ack decorator that sends
    it, and its checkpoint part (`name`, `snapshot`, `restore`, `take_over`)."""

    name = "clip_demand"

    def __init__(
        self,
        cfg: EdgeClipsConfig,
        metrics: EdgeMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self._clock = clock
        self._keep_ns = int(cfg.keep_ended_s * 1e9)
        self._cameras: dict[str, _Camera] = {}
        self._lock = threading.Lock()

    # ---- the stage (worker thread) --------------------------------------------------------

    def __call__(self, frame: TrackedFrame) -> TrackedFrame:
        h = frame.decoded.header
        self._update(h.camera_id, h.capture_ns, frame.events)
        return frame

    def answered(self, frame: AnsweredFrame) -> AnsweredFrame:
        h = frame.answer.header
        self._update(h.camera_id, h.capture_ns, frame.events)
        return frame

    def _update(self, camera_id: str, now_ns: int, events: Iterable[events_pb2.TrackEvent]) -> None:
        with self._lock:
            cam = self._cameras.get(camera_id)
            if cam is None:
                cam = self._cameras[camera_id] = _Camera()
            changed = False
            for ev in events:
                changed |= _apply(cam.tracks, ev)
            if now_ns:
                changed |= self._expire(cam, now_ns)
            if changed:
                cam.version += 1
                cam.message = None

    def _expire(self, cam: _Camera, now_ns: int) -> bool:
        gone = [uid for uid, (_, end) in cam.tracks.items() if end and now_ns - end > self._keep_ns]
        for uid in gone:
            del cam.tracks[uid]
        return bool(gone)

    # ---- the ack (ingest thread) ----------------------------------------------------------

    def decorate(self, ack: frame_pb2.FrameAck, h: frame_pb2.FrameHeader) -> None:
        """Put the camera's demand on this ack when that device session has not heard this
        version of it, or not for `resend_s`."""
        now = self._clock()
        with self._lock:
            cam = self._cameras.get(h.camera_id)
            if cam is None:
                cam = self._cameras[h.camera_id] = _Camera()
            last = cam.sent.get(h.session_id)
            if last is not None and last[0] == cam.version and now - last[1] < self.cfg.resend_s:
                return
            if cam.message is None:
                cam.message = self._message(h.camera_id, cam)
            cam.sent.pop(h.session_id, None)
            cam.sent[h.session_id] = (cam.version, now)
            while len(cam.sent) > SESSIONS_PER_CAMERA:
                del cam.sent[next(iter(cam.sent))]
            ack.clips.extend(cam.message)
        ack.clips_set = True
        self.metrics.clip_demand_sent.inc()

    def _message(self, camera_id: str, cam: _Camera) -> list[frame_pb2.ClipDemand]:
        """The demand as sent: live tracks first, then the ended, newest first; capped (a
        track left out is counted once)."""
        ordered = _ordered(cam)
        left_out = {uid for uid, _ in ordered[self.cfg.max_tracks :]}
        new = left_out - cam.cut
        cam.cut = left_out
        if new:
            self.metrics.clip_demand_cut.inc(len(new))
            log.warning(
                "camera %s: clip demand of %d tracks over edge.clips.max_tracks (%d): %d more "
                "left out (the oldest; no clip asked for them)",
                camera_id,
                len(ordered),
                self.cfg.max_tracks,
                len(new),
            )
        return [
            frame_pb2.ClipDemand(track_uid=uid, start_ns=start, end_ns=end)
            for uid, (start, end) in ordered[: self.cfg.max_tracks]
        ]

    def demand(self, camera_id: str) -> list[tuple[str, int, int]]:
        """The camera's tracks as (uid, start_ns, end_ns), in the order sent (status, tests)."""
        with self._lock:
            cam = self._cameras.get(camera_id)
            ordered = _ordered(cam) if cam is not None else []
        return [(uid, start, end) for uid, (start, end) in ordered[: self.cfg.max_tracks]]

    def forget_cameras(self, cameras: list[str]) -> None:
        """Cameras gone silent (ingest): their demand goes with them."""
        with self._lock:
            for camera_id in cameras:
                self._cameras.pop(camera_id, None)

    # ---- checkpoint part ------------------------------------------------------------------

    def snapshot(self) -> dict[str, list[list[Any]]]:
        with self._lock:
            return {
                cam: [[uid, start, end] for uid, (start, end) in c.tracks.items()]
                for cam, c in self._cameras.items()
                if c.tracks
            }

    def restore(self, data: Any) -> str:
        if not isinstance(data, dict):
            raise ValueError(f"clip demand: a mapping by camera expected, got {type(data)}")
        cameras = {str(cam): _tracks(cam, rows) for cam, rows in data.items()}
        with self._lock:
            for cam, tracks in cameras.items():
                self._cameras[cam] = _Camera(tracks)
        return f"{sum(len(t) for t in cameras.values())} track(s)"

    def take_over(self, data: Any, camera: str, peer: str) -> int:
        """A camera moved here from `peer`: its demand from the peer's checkpoint."""
        rows = data.get(camera) if isinstance(data, dict) else None
        if rows is None:
            return 0
        try:
            tracks = _tracks(camera, rows)
        except (ValueError, TypeError) as exc:
            log.error("clip demand of camera %s from edge %s not restored: %s", camera, peer, exc)
            return 0
        with self._lock:
            cam = self._cameras.setdefault(camera, _Camera())
            cam.tracks, cam.message = tracks, None
            cam.version += 1
        return 1


def _ordered(cam: _Camera) -> list[tuple[str, list[int]]]:
    """Live tracks first, then the ended; the most recent first of each."""
    return sorted(cam.tracks.items(), key=lambda kv: (kv[1][1] != 0, -(kv[1][1] or kv[1][0])))


def _apply(tracks: dict[str, list[int]], ev: events_pb2.TrackEvent) -> bool:
    """A lifecycle event into a camera's tracks; True when they changed."""
    if ev.type not in (NEW, END) or not ev.track_uid:
        return False
    start = ev.path.first_seen_ns or ev.capture_ns
    if ev.type == NEW:
        if ev.track_uid in tracks:
            return False
        tracks[ev.track_uid] = [start, 0]
        return True
    end = ev.path.last_seen_ns or ev.capture_ns
    entry = tracks.setdefault(ev.track_uid, [start, 0])
    if entry[1] == end:
        return False
    entry[1] = max(end, entry[0])
    return True


def _tracks(camera: Any, rows: Any) -> dict[str, list[int]]:
    """A camera's tracks from a checkpoint; ValueError on a malformed one."""
    if not isinstance(rows, list):
        raise ValueError(f"clip demand of camera {camera}: a list expected")
    out: dict[str, list[int]] = {}
    for row in rows:
        if not isinstance(row, list) or len(row) != 3:
            raise ValueError(f"clip demand of camera {camera}: bad entry {row!r}")
        uid, start, end = row
        out[str(uid)] = [int(start), int(end)]
    return out
