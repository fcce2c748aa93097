"""Track snapshots: for every track the best crop and a full-frame JPEG of that moment, chosen
at the edge (which holds the decoded frames) and sent with the track's events.

A stage after the rules stage (strata.edge.tracking.handoff), so it sees the events each
frame caused. On a detected frame every observed box of a track is scored: its `quality`
is the detector's score times (1 - edge_penalty) per box side touching the frame's border
(an object cut off by the edge makes a poor picture). A box that beats its track's best
by `min_gain` becomes the best: its crop (padded, from the decoded image) and the whole
frame (scaled down to `max_width`) are encoded to JPEG now, so a track holds two JPEGs, not
a frame. They go out as `Snapshot`s (events.proto):

    new       the best so far (reason FIRST), the `new` event naming it
    living    a better one at most every `update_every_s` of capture time (BETTER)
    end       the best of the track's life unless already sent (FINAL), the `end` naming it

Every event of a track names the latest ids sent (`crop_snapshot_id`, `frame_snapshot_id`).
A snapshot's revision is the milliseconds from the track's first sighting to its frame, so
a later best has a higher one and a replay after a restart gives the same ids (the cloud
keeps the highest revision per track and kind). Once handed to the uplink a snapshot is on
disk (the uplink writes it through to its spool, as it does events), so an event never names
a snapshot that a kill -9 of the edge could lose. The stage's state is not checkpointed: a
track that lives through a restart gets snapshots again from its next best.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from strata.edge.metrics import EdgeMetrics
from strata.edge.tracking.handoff import AnsweredFrame, TrackedFrame
from strata.shared.config.edge import SnapshotsConfig
from strata.shared.contracts import common_pb2, current_version, events_pb2
from strata.shared.snapshot_ids import snapshot_id

log = logging.getLogger(__name__)

_S = events_pb2
_NEW, _END = _S.TRACK_EVENT_TYPE_NEW, _S.TRACK_EVENT_TYPE_END
_REASONS: dict[int, str] = {
    _S.SNAPSHOT_REASON_FIRST: "first",
    _S.SNAPSHOT_REASON_BETTER: "better",
    _S.SNAPSHOT_REASON_FINAL: "final",
}


@dataclass(frozen=True, slots=True)
class _Jpeg:
    """One encoded picture and the object's box in its pixels."""

    data: bytes
    width: int
    height: int
    box: tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class _Best:
    """A track's best moment so far, encoded."""

    quality: float
    score: float
    class_id: int
    capture_ns: int
    touches_edge: bool
    # The box in the source frame's pixels, and the source frame's size.
    frame_box: tuple[float, float, float, float]
    frame_size: tuple[int, int]
    crop: _Jpeg
    frame: _Jpeg


@dataclass(slots=True)
class _Track:
    uid: str = ""
    best: _Best | None = None
    # What went out last: its revision (-1: nothing), ids, and its best's capture time.
    sent_revision: int = -1
    sent_ids: tuple[str, str] = ("", "")
    sent_ns: int = 0


def quality(
    boxes: np.ndarray, scores: np.ndarray, size: tuple[int, int], cfg: SnapshotsConfig
) -> tuple[np.ndarray, np.ndarray]:
    """(quality, sides touching the border) per box (source pixels, frame `size`)."""
    w, h = size
    mx, my = cfg.edge_margin * w, cfg.edge_margin * h
    sides = (
        (boxes[:, 0] <= mx).astype(np.int64)
        + (boxes[:, 1] <= my)
        + (boxes[:, 2] >= w - mx)
        + (boxes[:, 3] >= h - my)
    )
    return scores * (1.0 - cfg.edge_penalty) ** sides, sides


class SnapshotStage:
    """A `TrackedStage` choosing and sending each track's snapshots (worker thread only)."""

    name = "snapshots"

    def __init__(
        self,
        cfg: SnapshotsConfig,
        labels: Sequence[str],
        edge_id: str,
        metrics: EdgeMetrics,
    ) -> None:
        self.cfg = cfg
        self.labels = tuple(labels)
        self.edge_id = edge_id
        self.metrics = metrics
        # (camera, tracker id) -> state, oldest first (bounded by max_tracks).
        self._tracks: dict[tuple[str, int], _Track] = {}
        # Tracks whose best is newer than what was sent (BETTER candidates), per camera.
        self._newer: dict[str, set[int]] = {}

    # ---- the stage -------------------------------------------------------------------------

    def __call__(self, frame: TrackedFrame) -> TrackedFrame:
        t = frame.tracked
        if t is not None and not frame.predicted and frame.image_boxes is not None:
            if frame.decoded.image.size:
                self._consider(frame)
            h = frame.decoded.header
            for tid in t.ended:  # retired before confirmation: no event will end it
                st = self._tracks.get((h.camera_id, tid))
                if st is not None and not st.uid:
                    del self._tracks[(h.camera_id, tid)]
        out = self._events(frame.events)
        if frame.decoded.header.capture_ns:
            h = frame.decoded.header
            out += self._better(h.camera_id, h.capture_ns)
        return replace(frame, snapshots=frame.snapshots + tuple(out)) if out else frame

    def answered(self, frame: AnsweredFrame) -> AnsweredFrame:
        out = self._events(frame.events)
        return replace(frame, snapshots=frame.snapshots + tuple(out)) if out else frame

    # ---- choosing --------------------------------------------------------------------------

    def _consider(self, frame: TrackedFrame) -> None:
        """Make the observed boxes that beat their track's best the new bests."""
        t, h = frame.tracked, frame.decoded.header
        assert t is not None and frame.image_boxes is not None
        size = (h.source_width or h.width, h.source_height or h.height)
        if not len(t) or not size[0] or not size[1]:
            return
        q, sides = quality(t.boxes, t.scores, size, self.cfg)
        observed = (t.track_ids != 0) & (t.uncertainty == 0)
        bar = np.array([self._bar(h.camera_id, int(i)) for i in t.track_ids.tolist()], np.float64)
        for i in np.flatnonzero(observed & (q > bar)).tolist():
            key = (h.camera_id, int(t.track_ids[i]))
            best = self._encode(frame, i, float(q[i]), bool(sides[i]), size)
            if best is None:
                continue
            st = self._tracks.pop(key, None) or _Track()
            self._tracks[key] = st  # most recently improved last
            st.best = best
            if st.uid:
                self._newer.setdefault(h.camera_id, set()).add(key[1])
        while len(self._tracks) > self.cfg.max_tracks:
            (cam, tid), _ = next(iter(self._tracks.items()))
            del self._tracks[(cam, tid)]
            self._newer.get(cam, set()).discard(tid)

    def _bar(self, camera: str, track_id: int) -> float:
        """The quality a box of the track must beat."""
        st = self._tracks.get((camera, track_id))
        if st is None or st.best is None:
            return 0.0
        return st.best.quality * (1.0 + self.cfg.min_gain)

    def _encode(
        self, frame: TrackedFrame, i: int, q: float, touches: bool, size: tuple[int, int]
    ) -> _Best | None:
        """Box i's crop and the whole frame as JPEGs (None: an empty crop, or no encoder)."""
        import cv2

        t, img = frame.tracked, frame.decoded.image
        assert t is not None and frame.image_boxes is not None
        ih, iw = img.shape[:2]
        x1, y1, x2, y2 = (float(v) for v in frame.image_boxes.boxes[i])
        pw, ph = (x2 - x1) * self.cfg.crop_pad, (y2 - y1) * self.cfg.crop_pad
        cx1, cy1 = max(0, int(x1 - pw)), max(0, int(y1 - ph))
        cx2, cy2 = min(iw, int(np.ceil(x2 + pw))), min(ih, int(np.ceil(y2 + ph)))
        if cx2 - cx1 < 2 or cy2 - cy1 < 2:
            return None
        params = [cv2.IMWRITE_JPEG_QUALITY, self.cfg.jpeg_quality]
        ok, crop = cv2.imencode(".jpg", img[cy1:cy2, cx1:cx2], params)
        scale = min(1.0, self.cfg.max_width / iw)
        fw, fh = max(1, round(iw * scale)), max(1, round(ih * scale))
        whole = img if scale == 1.0 else cv2.resize(img, (fw, fh), interpolation=cv2.INTER_AREA)
        ok2, full = cv2.imencode(".jpg", whole, params)
        if not ok or not ok2:
            return None
        fb = t.boxes[i]
        return _Best(
            quality=q,
            score=float(t.scores[i]),
            class_id=int(t.class_ids[i]),
            capture_ns=frame.decoded.header.capture_ns or frame.decoded.frame.receive_ns,
            touches_edge=touches,
            frame_box=(float(fb[0]), float(fb[1]), float(fb[2]), float(fb[3])),
            frame_size=size,
            crop=_Jpeg(
                crop.tobytes(), cx2 - cx1, cy2 - cy1, (x1 - cx1, y1 - cy1, x2 - cx1, y2 - cy1)
            ),
            frame=_Jpeg(full.tobytes(), fw, fh, (x1 * scale, y1 * scale, x2 * scale, y2 * scale)),
        )

    # ---- sending ---------------------------------------------------------------------------

    def _events(self, events: Sequence[events_pb2.TrackEvent]) -> list[events_pb2.Snapshot]:
        """Snapshots for `new` and `end`; every event of a track names the latest sent."""
        out: list[events_pb2.Snapshot] = []
        for ev in events:
            key = (ev.camera_id, ev.track_id)
            st = self._tracks.get(key)
            if ev.type == _NEW and (st is None or st.uid != ev.track_uid):
                if st is not None and st.uid:  # an id reused by a new track
                    st = None
                st = st or _Track()
                self._tracks[key] = st
                st.uid = ev.track_uid
            if st is None:
                continue
            if not st.uid:  # a track that lived through a restart: its events name it
                st.uid = ev.track_uid
            if st.uid != ev.track_uid:
                continue
            if ev.type == _NEW:
                out += self._send(key, st, _S.SNAPSHOT_REASON_FIRST)
            elif ev.type == _END:
                out += self._send(key, st, _S.SNAPSHOT_REASON_FINAL)
            ev.crop_snapshot_id, ev.frame_snapshot_id = st.sent_ids
            if ev.type == _END:
                del self._tracks[key]
                self._newer.get(ev.camera_id, set()).discard(ev.track_id)
        return out

    def _better(self, camera: str, now_ns: int) -> list[events_pb2.Snapshot]:
        """BETTER snapshots of the camera's living tracks that are due."""
        ids = self._newer.get(camera)
        if not ids or self.cfg.update_every_s <= 0:
            return []
        out: list[events_pb2.Snapshot] = []
        wait_ns = int(self.cfg.update_every_s * 1e9)
        for tid in list(ids):
            st = self._tracks.get((camera, tid))
            if st is None or st.best is None:
                ids.discard(tid)
            elif st.sent_revision < 0 or now_ns - st.sent_ns >= wait_ns:
                out += self._send((camera, tid), st, _S.SNAPSHOT_REASON_BETTER)
                ids.discard(tid)
        return out

    def _send(self, key: tuple[str, int], st: _Track, reason: int) -> list[events_pb2.Snapshot]:
        """The track's best as two Snapshots, unless it went out already."""
        b = st.best
        if b is None:
            return []
        first_ns = int(st.uid.partition("-")[0] or 0)
        revision = min(max(0, (b.capture_ns - first_ns) // 1_000_000), 2**32 - 1)
        if revision <= st.sent_revision:
            return []
        camera, tid = key
        label = self.labels[b.class_id] if 0 <= b.class_id < len(self.labels) else ""
        out = []
        for kind, pic in (
            (_S.SNAPSHOT_KIND_BEST_CROP, b.crop),
            (_S.SNAPSHOT_KIND_FULL_FRAME, b.frame),
        ):
            snap = _S.Snapshot(
                version=current_version(),
                snapshot_id=snapshot_id(camera, st.uid, kind, revision),
                camera_id=camera,
                track_uid=st.uid,
                track_id=tid,
                kind=kind,  # type: ignore[arg-type]
                revision=revision,
                edge_id=self.edge_id,
                jpeg=pic.data,
                width=pic.width,
                height=pic.height,
                box=common_pb2.Box(x1=pic.box[0], y1=pic.box[1], x2=pic.box[2], y2=pic.box[3]),
                frame_box=common_pb2.Box(
                    x1=b.frame_box[0], y1=b.frame_box[1], x2=b.frame_box[2], y2=b.frame_box[3]
                ),
                frame_width=b.frame_size[0],
                frame_height=b.frame_size[1],
                label=label,
                score=b.score,
                quality=b.quality,
                touches_edge=b.touches_edge,
                capture_ns=b.capture_ns,
                reason=reason,  # type: ignore[arg-type]
            )
            out.append(snap)
        st.sent_revision = revision
        st.sent_ids = (out[0].snapshot_id, out[1].snapshot_id)
        st.sent_ns = b.capture_ns
        self._newer.get(camera, set()).discard(tid)
        self.metrics.snapshots_chosen.labels(_REASONS[reason]).inc()
        return out
