"""An answer for every source frame: detected frames feed the tracker, skipped ones are
answered from it.

The tracker must see a camera's frames in frame order, but a skipped frame (header only)
overtakes the kept frames still waiting for the detector. So a skipped frame waits here
until every kept frame before it has been detected (or given up), then is answered:

- `predict`: from the tracker moved to the frame (lowest latency);
- `interpolate`: the answer also waits for the next detected frame, and a track seen in
  both is interpolated between its two boxes; one only before is predicted (first half of
  the gap), one only after appears in the second half. More accurate at the cost of up to
  a gap of latency (vtest, 1 frame in 5 kept: box F1 0.93 against 0.86 predicted).

A skipped frame held longer than `hold_s` is answered by prediction, whatever the mode,
so a lost kept frame never holds results back for long. Thread-safe: ingest adds, the
worker answers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace

import numpy as np
from strata.edge.tracking.appearance import Appearance
from strata.edge.tracking.tracker import TrackedBoxes, Tracker, TrackerState
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes, iou

# The device's skip reason of a frame its motion gate dropped: it differed from the last
# kept frame by less than the threshold (device/camera.py).
STILL_REASON = "motion"


@dataclass(frozen=True, slots=True)
class Answer:
    """A result to publish for a skipped frame."""

    header: frame_pb2.FrameHeader
    boxes: TrackedBoxes
    # When it arrived (time.monotonic()), for latency metrics.
    received: float
    receive_ns: int
    # "predicted" or "interpolated"; "timeout" when hold_s ran out first.
    how: str
    # What the caller handed in with the skipped frame (the node: its queued message, to
    # send the final ack once the answer is published).
    token: object = None


@dataclass(slots=True)
class _Held:
    header: frame_pb2.FrameHeader
    received: float
    receive_ns: int
    token: object = None


class _Camera:
    def __init__(self, cfg: TrackingConfig, appearance: Appearance | None, camera: str) -> None:
        on = appearance is not None and appearance.cfg.on(camera)
        self.appearance = appearance if on else None
        self.tracker = (
            Tracker(cfg, appearance.cfg, appearance.classes)
            if on and appearance is not None
            else Tracker(cfg)
        )
        # Kept frames accepted but not yet detected (frame indices, in arrival order).
        self.pending: deque[int] = deque()
        self.held: deque[_Held] = deque()
        # The last detected frame and its answer (for interpolation).
        self.last: tuple[int, TrackedBoxes] | None = None
        self.width = 0
        self.height = 0
        self.used = time.monotonic()


def _source_size(h: frame_pb2.FrameHeader) -> tuple[int, int]:
    return (h.source_width or h.width, h.source_height or h.height)


class Answers:
    """Per-camera trackers and the skipped frames waiting for their answer."""

    def __init__(self, cfg: TrackingConfig, appearance: Appearance | None = None) -> None:
        """`appearance`: embeddings for the cameras it is on for (edge.appearance)."""
        self.cfg = cfg
        self.appearance = appearance
        self._lock = threading.Lock()
        self._cams: dict[tuple[int, str], _Camera] = {}

    def _cam(self, h: frame_pb2.FrameHeader) -> _Camera:
        key = (h.session_id, h.camera_id)
        c = self._cams.get(key)
        if c is None:
            c = self._cams[key] = _Camera(self.cfg, self.appearance, h.camera_id)
        c.used = time.monotonic()
        return c

    def tracker(self, session: int, camera: str) -> Tracker | None:
        """The camera's tracker (for calibration and feedback), if it has one."""
        with self._lock:
            c = self._cams.get((session, camera))
            return c.tracker if c else None

    def trackers(self) -> list[Tracker]:
        """Every camera's tracker (for metrics)."""
        with self._lock:
            return [c.tracker for c in self._cams.values()]

    def snapshot(self) -> list[tuple[int, str, TrackerState]]:
        """(session, camera, state) of every camera's tracker (for a checkpoint)."""
        with self._lock:
            return [(k[0], k[1], c.tracker.snapshot()) for k, c in self._cams.items()]

    def restore(self, session: int, camera: str, state: TrackerState) -> bool:
        """Seed a camera's tracker from a checkpoint, unless the one here has seen later
        frames already (True when restored). ValueError: the state is inconsistent."""
        fresh = _Camera(self.cfg, self.appearance, camera)
        fresh.tracker.restore(state)
        with self._lock:
            c = self._cams.get((session, camera))
            if c is not None and c.tracker.last_frame >= state.last_frame:
                return False
            if c is None:
                c = self._cams[(session, camera)] = fresh
            c.tracker = fresh.tracker
            return True

    def expect(self, h: frame_pb2.FrameHeader) -> None:
        """A kept frame was accepted for detection: later skipped frames wait for it."""
        with self._lock:
            self._cam(h).pending.append(h.frame_index)

    def abandon(self, h: frame_pb2.FrameHeader) -> None:
        """A kept frame will not be detected (shed, undecodable): stop waiting for it."""
        with self._lock:
            c = self._cams.get((h.session_id, h.camera_id))
            if c is not None and h.frame_index in c.pending:
                c.pending.remove(h.frame_index)

    def skipped(
        self, h: frame_pb2.FrameHeader, received: float, receive_ns: int, token: object = None
    ) -> None:
        """A skipped frame to answer once the frames before it are known."""
        with self._lock:
            c = self._cam(h)
            c.width, c.height = _source_size(h)
            c.held.append(_Held(h, received, receive_ns, token))

    def detected(
        self, h: frame_pb2.FrameHeader, boxes: FrameBoxes, image: np.ndarray | None = None
    ) -> tuple[TrackedBoxes, list[Answer]]:
        """A kept frame's detections (source pixels): them with track ids, and the skipped
        frames that can be answered now. `image`: the decoded frame (any scale of the
        source), for appearance's crops on cameras it is on for."""
        now = time.monotonic()
        out: list[Answer] = []
        with self._lock:
            c = self._cam(h)
            idx = h.frame_index
            if idx in c.pending:
                c.pending.remove(idx)
            c.width, c.height = _source_size(h)
            if not self.cfg.enabled:
                tracked = _ids_from(TrackedBoxes.empty(), boxes)
            elif idx < c.tracker.last_frame:
                # Older than what the tracker has seen (a resend after a restart): ids only
                # where a box matches; the tracker's state is not rewound.
                tracked = _ids_from(c.tracker.predict(idx), boxes)
            else:
                gone = self._cut(c, idx, out) if h.scene_change else ()
                # Prediction-mode frames before this one are answered from the state
                # before it is corrected.
                self._answer(c, now, out, before=idx)
                embed = (
                    c.appearance.embed_fn(image, boxes, _source_size(h)) if c.appearance else None
                )
                tracked = c.tracker.update(idx, boxes, embed)
                if gone:
                    tracked = replace(tracked, ended=(*gone, *tracked.ended))
            # Interpolation: the frames held between the last detected frame and this one.
            end = (idx, tracked)
            while c.held and c.held[0].header.frame_index < idx:
                if c.pending and c.pending[0] < c.held[0].header.frame_index:
                    break
                out.append(self._interpolated(c, c.held.popleft(), end))
            if c.last is None or idx >= c.last[0]:
                c.last = end
            self._answer(c, now, out)
        return tracked, out

    def ready(self, now: float | None = None) -> list[Answer]:
        """Skipped frames that can be answered now (or waited `hold_s`), in frame order."""
        now = time.monotonic() if now is None else now
        out: list[Answer] = []
        with self._lock:
            for c in self._cams.values():
                self._answer(c, now, out)
        return out

    def _cut(self, c: _Camera, idx: int, out: list[Answer]) -> tuple[int, ...]:
        """A scene change at `idx`: the frames held before it are answered from the old
        scene's tracks (nothing is interpolated across the cut), then every track is
        dropped (their ids returned, to end them) so the new scene seeds its own."""
        while c.held and c.held[0].header.frame_index < idx:
            held = c.held.popleft()
            i = held.header.frame_index
            boxes = c.tracker.predict(i, c.width, c.height) if self.cfg.enabled else _none()
            out.append(
                Answer(held.header, boxes, held.received, held.receive_ns, "predicted", held.token)
            )
        c.last = None
        return c.tracker.clear()

    def _answer(self, c: _Camera, now: float, out: list[Answer], before: int = -1) -> None:
        interpolate = self.cfg.answer == "interpolate" and before < 0
        while c.held:
            held = c.held[0]
            idx = held.header.frame_index
            blocked = bool(c.pending) and c.pending[0] < idx
            # Interpolation waits for a detected frame after this one as well.
            waiting = interpolate and (c.last is None or c.last[0] < idx)
            if before >= 0:
                # Called just before the tracker is corrected at `before`: only what that
                # correction would otherwise hide from a predict-mode answer.
                if self.cfg.answer == "interpolate" or idx >= before or blocked:
                    return
            elif (blocked or waiting) and now - held.received < self.cfg.hold_s:
                return
            c.held.popleft()
            boxes = c.tracker.predict(idx, c.width, c.height) if self.cfg.enabled else _none()
            late = before < 0 and (blocked or waiting)
            how = "timeout" if late else "predicted"
            out.append(Answer(held.header, boxes, held.received, held.receive_ns, how, held.token))

    def _interpolated(self, c: _Camera, held: _Held, end: tuple[int, TrackedBoxes]) -> Answer:
        idx = held.header.frame_index
        start = c.last
        if self.cfg.answer != "interpolate" or start is None or not self.cfg.enabled:
            pred = c.tracker.predict(idx, c.width, c.height) if self.cfg.enabled else _none()
            return Answer(
                held.header, pred, held.received, held.receive_ns, "predicted", held.token
            )
        a_idx, a = start
        b_idx, b = end
        w = (idx - a_idx) / max(b_idx - a_idx, 1)
        # The motion gate dropped it for differing too little from the last kept frame:
        # what is first seen on the next kept frame was not there yet.
        still = held.header.skip_reason == STILL_REASON
        boxes = interpolate(a, b, w, appear=not still)
        return Answer(
            held.header, boxes, held.received, held.receive_ns, "interpolated", held.token
        )

    def forget_idle(self, idle_s: float, now: float | None = None) -> int:
        """Drop cameras with nothing held and no frame for `idle_s`."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [
                k
                for k, c in self._cams.items()
                if not c.held and not c.pending and now - c.used > idle_s
            ]
            for k in idle:
                del self._cams[k]
        return len(idle)

    def held(self) -> int:
        """Skipped frames waiting for an answer, all cameras."""
        with self._lock:
            return sum(len(c.held) for c in self._cams.values())


def _none() -> TrackedBoxes:
    return TrackedBoxes.empty(predicted=True)


def _ids_from(pred: TrackedBoxes, boxes: FrameBoxes) -> TrackedBoxes:
    ids = np.zeros(len(boxes), np.uint64)
    if len(pred) and len(boxes):
        m = iou(boxes.boxes, pred.boxes)
        best = m.argmax(axis=1)
        ok = m[np.arange(len(boxes)), best] >= 0.5
        ids[ok] = pred.track_ids[best[ok]]
    return TrackedBoxes(
        boxes.boxes, boxes.scores, boxes.class_ids, ids, np.zeros(len(boxes), np.float32), False
    )


def interpolate(a: TrackedBoxes, b: TrackedBoxes, w: float, appear: bool = True) -> TrackedBoxes:
    """Boxes at fraction `w` (0..1) of the way from detected frame `a` to detected `b`.

    A track in both: linear between its boxes. Only in `a` (it left, or the detector
    missed it in `b`): its box in `a`, held, in the first half. Only in `b` (new, or
    missed in `a`): its box in `b` in the second half. Not the tracker's prediction for
    the first kind: after `b` corrected the tracker it predicts only tracks matched in
    `b`, so such a track vanished for the whole gap (vtest, 1 frame in 5 kept: box F1
    0.918 -> 0.924, counting 0.904 -> 0.930). `appear` False (the frame looked like `a`,
    the motion gate said): the tracks of `a` only, held all the way, and those of `b` only
    not at all (a passage that starts after 45 s of empty street is not drawn over the
    2.5 s before it).
    """
    ia = {int(t): i for i, t in enumerate(a.track_ids.tolist()) if t}
    ib = {int(t): i for i, t in enumerate(b.track_ids.tolist()) if t}
    both = [t for t in ia if t in ib]
    rows_a = np.array([ia[t] for t in both], np.int64)
    rows_b = np.array([ib[t] for t in both], np.int64)
    parts_box = [a.boxes[rows_a] * (1 - w) + b.boxes[rows_b] * w]
    parts_score = [a.scores[rows_a] * (1 - w) + b.scores[rows_b] * w]
    parts_cls = [a.class_ids[rows_a]]
    parts_id = [a.track_ids[rows_a]]
    conf_a, conf_b = a.confirmed_mask(), b.confirmed_mask()
    parts_conf = [conf_b[rows_b]]
    if w < 0.5 or not appear:
        gone = np.array([ia[t] for t in ia if t not in ib], np.int64)
        parts_box.append(a.boxes[gone])
        parts_score.append(a.scores[gone])
        parts_cls.append(a.class_ids[gone])
        parts_id.append(a.track_ids[gone])
        parts_conf.append(conf_a[gone])
    else:
        new = np.array([ib[t] for t in ib if t not in ia], np.int64)
        parts_box.append(b.boxes[new])
        parts_score.append(b.scores[new])
        parts_cls.append(b.class_ids[new])
        parts_id.append(b.track_ids[new])
        parts_conf.append(conf_b[new])
    n = sum(len(x) for x in parts_id)
    return TrackedBoxes(
        np.concatenate(parts_box).astype(np.float32).reshape(-1, 4),
        np.concatenate(parts_score).astype(np.float32),
        np.concatenate(parts_cls).astype(np.int32),
        np.concatenate(parts_id).astype(np.uint64),
        np.full(n, min(w, 1 - w), np.float32),
        True,
        np.concatenate(parts_conf).astype(bool),
    )
