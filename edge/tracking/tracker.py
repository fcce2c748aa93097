"""Multi-object tracking per camera at the edge: track ids, and boxes for frames not sent.

ByteTrack's association (Zhang et al. 2022): detections above `high_score` are matched to
the tracks' predicted boxes first (Hungarian on 1 - IoU, same class only), then the tracks
left over take the low-score detections, so an object whose score dips keeps its id.
Unmatched high-score detections start tracks. Each track carries a constant-velocity
Kalman filter on (cx, cy, w, h); time is the source frame index, so a gap of k frames the
device did not send is one prediction step of length k, not k steps.

Then OC-SORT's observation-centric recovery (Cao et al. 2023): tracks still unmatched, and
missed at the previous detected frame too, are tried against the unmatched confident
detections by their last observed box, not their prediction, which drifts on a stale
velocity while a person is hidden or meets another (two people who meet and part
otherwise come out with new ids, and a new id born inside a zone counts as an entry).
The first association's cost also has OC-SORT's direction term: a detection that lies
behind a moving track's last observation costs more, so where two people meet and pass,
each keeps the one ahead of it.

Why not a library: supervision >= 0.28 moved ByteTrack into `trackers`, which (like
supervision <= 0.27 and boxmot) requires `opencv-python`, a second OpenCV beside our
headless one (boxmot also pulls PyTorch); norfair requires numpy < 2. The assignment is
scipy's `linear_sum_assignment`; the filter is vectorized over all tracks of a camera.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from pydantic import Field
from scipy.optimize import linear_sum_assignment
from strata.edge.tracking.reid import EmbedFn, FrameLooks, Looks, LooksState
from strata.shared.config.appearance import AppearanceConfig
from strata.shared.config.base import StrictModel
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes, iou

log = logging.getLogger(__name__)

# Noise as a fraction of the box height (ByteTrack's weights): measurement, and the process
# per frame of position and velocity.
# The velocity noise is 4x ByteTrack's: at a few kept frames per second people turn and
# stop between looks (vtest: box F1 0.848 vs 0.815 at 1 frame in 5 kept).
_STD_MEAS = 1.0 / 20
_STD_POS = 1.0 / 20
_STD_VEL = 1.0 / 40


@dataclass(frozen=True, slots=True)
class TrackedBoxes:
    """One frame's answer: boxes (k, 4) in source pixels, scores, classes, track ids (0: none).

    `uncertainty` is per box: the predicted position's standard deviation over the box
    height (0 for a detected box); `predicted` says no detector ran on this frame.
    `confirmed` per box: its track has `min_hits` hits (None: every tracked box is, as
    `predict` shows only confirmed tracks); `ended`: ids the tracker retired at this frame
    (the rules stage ends their tracks).
    """

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    track_ids: np.ndarray
    uncertainty: np.ndarray
    predicted: bool
    confirmed: np.ndarray | None = None
    ended: tuple[int, ...] = ()

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def confirmed_mask(self) -> np.ndarray:
        """Per box: its track is confirmed (track id 0: never)."""
        tracked: np.ndarray = self.track_ids != 0
        return tracked if self.confirmed is None else tracked & self.confirmed

    def as_frame_boxes(self) -> FrameBoxes:
        """The boxes without track data."""
        return FrameBoxes(self.boxes, self.scores, self.class_ids)

    @classmethod
    def empty(cls, predicted: bool = False) -> TrackedBoxes:
        """No objects."""
        z = np.zeros((0,), np.float32)
        return cls(
            np.zeros((0, 4), np.float32),
            z,
            np.zeros((0,), np.int32),
            np.zeros((0,), np.uint64),
            z,
            predicted,
        )


class TrackerState(StrictModel):
    """A tracker's state as JSON-able numbers (checkpoints, edge/state/checkpoint.py): per track
    its Kalman state (8), covariance (64, row-major), frame, last match, hits, id, class
    and score; and the camera's id counter, so ids never repeat after a restore."""

    next_id: int = Field(ge=1)
    started: int = Field(ge=0)
    last_frame: int
    last_update: int
    x: list[list[float]] = Field(default_factory=list)
    p: list[list[float]] = Field(default_factory=list)
    frame: list[int] = Field(default_factory=list)
    seen: list[int] = Field(default_factory=list)
    hits: list[int] = Field(default_factory=list)
    ids: list[int] = Field(default_factory=list)
    cls: list[int] = Field(default_factory=list)
    score: list[float] = Field(default_factory=list)
    # Last observed box (x1 y1 x2 y2) per track; empty (older checkpoints): the state's box.
    obs: list[list[float]] = Field(default_factory=list)
    # Appearance (edge.appearance on): the tracks' embeddings; None (older checkpoints, or
    # appearance off): a restored track gets one again from its next crop.
    looks: LooksState | None = None


def _to_xywh(boxes: np.ndarray) -> np.ndarray:
    out = np.empty((boxes.shape[0], 4), np.float64)
    out[:, :2] = (boxes[:, :2] + boxes[:, 2:]) / 2
    out[:, 2:] = boxes[:, 2:] - boxes[:, :2]
    return out


def _sigma_of(x: np.ndarray, var: np.ndarray) -> np.ndarray:
    """Position standard deviation (from the x plus y variance) over box height, per track."""
    return np.asarray(np.sqrt(var) / np.maximum(x[:, 3], 1.0), np.float32)


def _to_xyxy(xywh: np.ndarray) -> np.ndarray:
    half = np.maximum(xywh[:, 2:4], 1.0) / 2
    return np.concatenate([xywh[:, :2] - half, xywh[:, :2] + half], axis=1).astype(np.float32)


def centre_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance of box centres (N, M) over the mean height of the two boxes."""
    ca = (a[:, None, :2] + a[:, None, 2:]) / 2
    cb = (b[None, :, :2] + b[None, :, 2:]) / 2
    h = ((a[:, None, 3] - a[:, None, 1]) + (b[None, :, 3] - b[None, :, 1])) / 2
    return np.asarray(np.linalg.norm(ca - cb, axis=2) / np.maximum(h, 1.0), np.float32)


def size_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|log| of the height ratio of boxes (N, M): 0 for equal heights, 0.69 for double."""
    ha = np.maximum(a[:, 3] - a[:, 1], 1.0)
    hb = np.maximum(b[:, 3] - b[:, 1], 1.0)
    return np.asarray(np.abs(np.log(ha[:, None] / hb[None, :])), np.float32)


# Cost of a pair that must not match (gated out).
_FORBIDDEN = 1e6


def _assign(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the Hungarian matching; gated pairs never match."""
    if cost.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, cols = linear_sum_assignment(cost)
    ok = cost[rows, cols] < _FORBIDDEN
    return rows[ok], cols[ok]


class Tracker:
    """The tracks of one camera. Not thread-safe: one camera's frames arrive in order."""

    def __init__(
        self,
        cfg: TrackingConfig,
        appearance: AppearanceConfig | None = None,
        class_ids: frozenset[int] | None = None,
    ) -> None:
        """`appearance`: embeddings join motion in the association (edge/tracking/reid.py),
        for the classes `class_ids` (None: every class)."""
        self.cfg = cfg
        self.looks = Looks(appearance, class_ids) if appearance is not None else None
        self._next_id = 1
        # Per track: state (8,) cx cy w h and their velocities per frame, covariance (8, 8).
        self._x = np.zeros((0, 8), np.float64)
        self._p = np.zeros((0, 8, 8), np.float64)
        self._frame = np.zeros(0, np.int64)  # frame index the state is at
        self._seen = np.zeros(0, np.int64)  # last frame a detection matched
        self._hits = np.zeros(0, np.int64)
        self._ids = np.zeros(0, np.uint64)
        self._cls = np.zeros(0, np.int32)
        self._score = np.zeros(0, np.float32)
        self._obs = np.zeros((0, 4), np.float32)  # last observed box
        self._veto: np.ndarray | None = None  # this frame's pairs that look unlike
        self._last_frame = -1
        self._last_update = -1
        self.started = 0  # tracks ever started (for metrics)

    def __len__(self) -> int:
        return int(self._ids.shape[0])

    @property
    def last_frame(self) -> int:
        """The frame index of the last update or prediction (-1 before the first)."""
        return self._last_frame

    def snapshot(self) -> TrackerState:
        """The whole state (for a checkpoint)."""
        n = len(self)
        return TrackerState(
            next_id=self._next_id,
            started=self.started,
            last_frame=self._last_frame,
            last_update=self._last_update,
            x=self._x.tolist(),
            p=self._p.reshape(n, 64).tolist(),
            frame=self._frame.tolist(),
            seen=self._seen.tolist(),
            hits=self._hits.tolist(),
            ids=self._ids.tolist(),
            cls=self._cls.tolist(),
            score=self._score.tolist(),
            obs=self._obs.tolist(),
            looks=self.looks.snapshot() if self.looks is not None else None,
        )

    def restore(self, state: TrackerState) -> None:
        """Carry on from `state`; ValueError (nothing changed) when its arrays disagree."""
        n = len(state.ids)
        x = np.asarray(state.x, np.float64).reshape(-1, 8) if n else np.zeros((0, 8))
        p = np.asarray(state.p, np.float64).reshape(-1, 8, 8) if n else np.zeros((0, 8, 8))
        per_track = (state.frame, state.seen, state.hits, state.cls, state.score)
        obs = np.asarray(state.obs, np.float32).reshape(-1, 4) if state.obs else _to_xyxy(x)
        if (
            x.shape[0] != n
            or p.shape[0] != n
            or obs.shape[0] != n
            or any(len(a) != n for a in per_track)
        ):
            raise ValueError(f"tracker state of {n} tracks has arrays of other lengths")
        if n and max(state.ids) >= state.next_id:
            raise ValueError("tracker state: a track id at or above the next id")
        if self.looks is not None and state.looks is not None:
            try:
                self.looks.restore(state.looks, set(state.ids))
            except ValueError as exc:  # the tracks carry on; ids must never repeat
                log.warning(
                    "tracker state: appearance not restored (%s); its tracks get embeddings "
                    "again from their next crops",
                    exc,
                )
        self._x, self._p = x, p
        self._frame = np.asarray(state.frame, np.int64)
        self._seen = np.asarray(state.seen, np.int64)
        self._hits = np.asarray(state.hits, np.int64)
        self._ids = np.asarray(state.ids, np.uint64)
        self._cls = np.asarray(state.cls, np.int32)
        self._score = np.asarray(state.score, np.float32)
        self._obs = obs
        self._next_id, self.started = state.next_id, state.started
        self._last_frame, self._last_update = state.last_frame, state.last_update

    def _predicted(self, frame: int) -> tuple[np.ndarray, np.ndarray]:
        """State and covariance of every track moved to `frame` (nothing stored)."""
        dt = np.maximum(frame - self._frame, 0).astype(np.float64)
        n = dt.shape[0]
        f = np.broadcast_to(np.eye(8), (n, 8, 8)).copy()
        f[:, [0, 1], [4, 5]] = dt[:, None]
        x = np.einsum("nij,nj->ni", f, self._x)
        h = np.maximum(self._x[:, 3], 1.0)
        q = np.zeros((n, 8), np.float64)
        q[:, :4] = (_STD_POS * h[:, None]) ** 2
        q[:, 4:] = (_STD_VEL * h[:, None]) ** 2
        # Noise grows with the gap; a zero gap adds none.
        qd = q * dt[:, None]
        p = np.einsum("nij,njk,nlk->nil", f, self._p, f)
        p[:, range(8), range(8)] += qd
        return x, p

    def _moved(self, frame: int) -> tuple[np.ndarray, np.ndarray]:
        """`_predicted`'s state and x plus y position variance, without its 8x8 products:
        only the centre moves, so var = P00 + 2 dt P04 + dt^2 P44 (and y's) + noise."""
        dt = np.maximum(frame - self._frame, 0).astype(np.float64)
        x = self._x.copy()
        x[:, 0] += dt * self._x[:, 4]
        x[:, 1] += dt * self._x[:, 5]
        p, h = self._p, np.maximum(self._x[:, 3], 1.0)
        var = p[:, 0, 0] + p[:, 1, 1] + 2.0 * dt * (p[:, 0, 4] + p[:, 1, 5] + (_STD_POS * h) ** 2)
        var += dt * dt * (p[:, 4, 4] + p[:, 5, 5])
        return x, var

    def update(self, frame: int, dets: FrameBoxes, embed: EmbedFn | None = None) -> TrackedBoxes:
        """Associate the detector's boxes of `frame`; returns them with their track ids.
        `embed` (appearance on): embeddings of the detections at given indices."""
        self._last_frame = max(self._last_frame, frame)
        previous, self._last_update = self._last_update, frame
        x, p = self._predicted(frame)
        pred = _to_xyxy(x)
        n_det = len(dets)
        det_ids = np.zeros(n_det, np.uint64)
        scores = dets.scores
        cfg = self.cfg
        high = np.flatnonzero(scores >= cfg.high_score)
        low = np.flatnonzero(scores < cfg.high_score)
        # At a low kept-frame rate boxes of a walking person may not overlap from one kept
        # frame to the next, so the cost is the centre distance (in box heights) less the
        # IoU, gated by distance and class, rather than IoU alone.
        ov = iou(pred, dets.boxes)
        dist = centre_distance(pred, dets.boxes)
        ok = (self._cls[:, None] == dets.class_ids[None, :]) & (
            (dist <= cfg.match_distance) | (ov >= cfg.match_iou)
        )
        cost = dist - ov
        if cfg.direction_weight > 0:
            cost += cfg.direction_weight * self._direction_cost(frame, dets.boxes)
        if cfg.size_weight > 0:
            cost += cfg.size_weight * size_cost(pred, dets.boxes)
        self._veto = None
        fl, extra = self._looks(frame, dets, high, ok, dist, embed)  # changes `ok` in place
        m = np.where(ok, cost + extra, _FORBIDDEN)
        free = np.ones(len(self), bool)
        confirmed = np.zeros(n_det, bool)
        matched_t: list[np.ndarray] = []
        matched_d: list[np.ndarray] = []
        for group in (high, low):
            tracks = np.flatnonzero(free)
            r, c = _assign(m[np.ix_(tracks, group)])
            t, d = tracks[r], group[c]
            free[t] = False
            matched_t.append(t)
            matched_d.append(d)
        # Only tracks already missed at the previous detected frame: one seen there has its
        # last observation just behind its prediction, and a newcomer beside it is no one's.
        rt, rd = self._recover(
            free & (self._seen < previous), high, np.concatenate(matched_d), dets
        )
        free[rt] = False
        lt, ld = self._relink(frame, free, high, np.concatenate([*matched_d, rd]), dets, fl)
        t = np.concatenate([*matched_t, rt, lt])
        d = np.concatenate([*matched_d, rd, ld])
        if t.size:
            x[t], p[t] = self._correct(x[t], p[t], _to_xywh(dets.boxes[d]))
            self._seen[t] = frame
            self._hits[t] += 1
            self._score[t] = scores[d]
            self._obs[t] = dets.boxes[d]
            det_ids[d] = self._ids[t]
            confirmed[d] = self._hits[t] >= cfg.min_hits
        self._x, self._p = x, p
        self._frame = np.full(len(self), frame, np.int64)
        # Tracks unseen for too long go; then unmatched confident detections start tracks.
        ended = self._retire(frame)
        new = high[det_ids[high] == 0]
        new = new[scores[new] >= cfg.new_track_score]
        if new.size:
            det_ids[new] = self._start(frame, dets, new)
            confirmed[new] = cfg.min_hits <= 1
        if self.looks is not None and fl is not None:
            self.looks.after(frame, fl, ended, det_ids, np.concatenate([d, new]))
        # A detected frame answers with the detector's own boxes: only ids are added.
        return TrackedBoxes(
            dets.boxes,
            dets.scores,
            dets.class_ids,
            det_ids,
            np.zeros(n_det, np.float32),
            False,
            confirmed,
            ended,
        )

    def _direction_cost(self, frame: int, boxes: np.ndarray) -> np.ndarray:
        """OC-SORT's direction consistency (N, M): 0 where the step from a track's last
        observation to a detection goes the way the track moves, 1 where it goes back; 0
        for a track or a step too short to have a direction (a fifth of a box height)."""
        v = self._x[:, 4:6]
        speed = np.linalg.norm(v, axis=1)
        h = np.maximum(self._x[:, 3], 1.0)
        step = (boxes[None, :, :2] + boxes[None, :, 2:]) / 2 - (
            self._obs[:, None, :2] + self._obs[:, None, 2:]
        ) / 2
        size = np.linalg.norm(step, axis=2)
        cos = (step * v[:, None, :]).sum(2) / np.maximum(size * speed[:, None], 1e-9)
        moving = speed * np.maximum(frame - self._seen, 1) > 0.2 * h
        return np.where(moving[:, None] & (size > 0.2 * h[:, None]), (1.0 - cos) / 2, 0.0)

    def _recover(
        self, free: np.ndarray, high: np.ndarray, taken: np.ndarray, dets: FrameBoxes
    ) -> tuple[np.ndarray, np.ndarray]:
        """Tracks left over (`free`) against confident detections no track took, by the
        track's last observed box: centre distance in box heights, gated by
        `recover_distance` and class; (tracks, detections) matched."""
        empty = np.zeros(0, np.int64)
        if self.cfg.recover_distance <= 0:
            return empty, empty
        tracks = np.flatnonzero(free)
        group = np.setdiff1d(high, taken)
        if not tracks.size or not group.size:
            return empty, empty
        boxes = dets.boxes[group]
        dist = centre_distance(self._obs[tracks], boxes)
        ov = iou(self._obs[tracks], boxes)
        ok = (self._cls[tracks, None] == dets.class_ids[None, group]) & (
            dist <= self.cfg.recover_distance
        )
        if self._veto is not None:  # appearance: people who look unlike are not recovered
            ok &= ~self._veto[np.ix_(tracks, group)]
        r, c = _assign(np.where(ok, dist - ov, _FORBIDDEN))
        return tracks[r], group[c]

    def _near(self, dets: FrameBoxes, dist: np.ndarray) -> np.ndarray:
        """Appearance's wider gate (tracks, detections): same class, within gate_distance."""
        reach = self.looks.cfg.gate_distance if self.looks is not None else 0.0
        near: np.ndarray = (self._cls[:, None] == dets.class_ids[None, :]) & (dist <= reach)
        return near

    def _looks(
        self,
        frame: int,
        dets: FrameBoxes,
        high: np.ndarray,
        ok: np.ndarray,
        dist: np.ndarray,
        embed: EmbedFn | None,
    ) -> tuple[FrameLooks | None, np.ndarray | float]:
        """Appearance on: the embeddings of the detections that need one (reid.py), and
        the appearance term of the cost; pairs that look alike are let into the gate `ok`."""
        if self.looks is None:
            return None, 0.0
        self.looks.ended.clear()
        allowed = np.zeros(len(dets), bool)
        allowed[high] = True
        if self.looks.class_ids is not None:
            allowed &= np.isin(dets.class_ids, list(self.looks.class_ids))
        near = self._near(dets, dist)
        idx, overlapping = self.looks.wanted(self._ids, ok, near, dets.boxes, allowed, frame)
        fl = self.looks.frame_looks(embed, idx, len(dets), overlapping)
        if not fl.has.any():
            return fl, 0.0
        alike, unlike, extra = self.looks.gate_and_cost(self._ids, fl)
        ok |= alike & near
        ok &= ~unlike
        self._veto = unlike
        return fl, extra

    def _relink(
        self,
        frame: int,
        free: np.ndarray,
        high: np.ndarray,
        taken: np.ndarray,
        dets: FrameBoxes,
        fl: FrameLooks | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Appearance's re-link (reid.py): lost tracks still free against the confident
        detections no track took; (tracks, detections) matched."""
        empty = np.zeros(0, np.int64)
        if self.looks is None or fl is None or not fl.has.any():
            return empty, empty
        lost = np.flatnonzero(free)
        lost = lost[frame - self._seen[lost] <= self.looks.cfg.relink_frames]
        group = np.setdiff1d(high, taken)
        group = group[np.isin(dets.class_ids[group], self._cls[lost])]
        return self.looks.relink(self._ids, lost, self._obs, group, dets.boxes, fl)

    def appearance(self, track_id: int) -> tuple[np.ndarray, int] | None:
        """A live (or just ended) track's embedding (the mean of its crops, reid.Look.mean)
        and its number of crops, if it has one."""
        if self.looks is None:
            return None
        look = self.looks.of(track_id)
        return None if look is None else (look.mean, look.samples)

    def predict(self, frame: int, width: int = 0, height: int = 0) -> TrackedBoxes:
        """Boxes of the live tracks moved to `frame` (nothing stored), clipped to the frame.

        A track shows when it is confirmed (`min_hits`), was seen at most `max_predict`
        frames before `frame`, and its predicted centre is inside the frame (when its size
        is given).
        """
        self._last_frame = max(self._last_frame, frame)
        if not len(self):
            return TrackedBoxes.empty(predicted=True)
        x, var = self._moved(frame)
        ok = (self._hits >= self.cfg.min_hits) & (
            self._last_update - self._seen <= self.cfg.max_predict
        )
        if width and height:
            ok &= (x[:, 0] >= 0) & (x[:, 0] < width) & (x[:, 1] >= 0) & (x[:, 1] < height)
        idx = np.flatnonzero(ok)
        boxes = _to_xyxy(x[idx])
        if width and height:
            np.clip(boxes, 0, (width, height, width, height), out=boxes)
        return TrackedBoxes(
            boxes,
            self._score[idx].copy(),
            self._cls[idx].copy(),
            self._ids[idx].copy(),
            _sigma_of(x[idx], var[idx]),
            True,
        )

    def uncertainty(self, frame: int) -> float:
        """The largest position uncertainty (std over box height) of the tracks at `frame`."""
        if not len(self):
            return 0.0
        x, var = self._moved(frame)
        live = self._last_update - self._seen <= self.cfg.max_predict
        if not live.any():
            return 0.0
        return float(_sigma_of(x[live], var[live]).max())

    def motion(self, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Centre (N, 2), velocity in pixels per frame (N, 2) and height (N,) of the tracks
        a detection matched at `frame`."""
        x = self._x[self._seen == frame]
        return x[:, :2].copy(), x[:, 4:6].copy(), np.maximum(x[:, 3], 1.0)

    def boxes(self) -> np.ndarray:
        """The tracks' boxes at their last state (N, 4), for attention regions."""
        return _to_xyxy(self._x)

    def moving(self, share: float = 0.01) -> int:
        """Tracks whose centre moves more than `share` of their box's height a frame, and
        those seen once (their speed unknown yet: counted as moving)."""
        speed = np.hypot(self._x[:, 4], self._x[:, 5])
        fast = speed > share * np.maximum(self._x[:, 3], 1.0)
        return int(np.count_nonzero(fast | (self._hits <= 1)))

    def velocities(self) -> np.ndarray:
        """Per track: speed of the centre in pixels per frame (N,)."""
        return np.asarray(np.hypot(self._x[:, 4], self._x[:, 5]), np.float32)

    def _correct(
        self, x: np.ndarray, p: np.ndarray, z: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # Measurement = the first four state entries; R scales with the box height.
        h = np.maximum(x[:, 3], 1.0)
        r = (_STD_MEAS * h) ** 2
        s = p[:, :4, :4] + r[:, None, None] * np.eye(4)
        k = np.einsum("nij,njk->nik", p[:, :, :4], np.linalg.inv(s))
        y = z - x[:, :4]
        x = x + np.einsum("nij,nj->ni", k, y)
        p = p - np.einsum("nij,njk->nik", k, p[:, :4, :])
        return x, p

    def _start(self, frame: int, dets: FrameBoxes, idx: np.ndarray) -> np.ndarray:
        n = idx.size
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.uint64)
        self._next_id += n
        self.started += n
        x = np.zeros((n, 8), np.float64)
        x[:, :4] = _to_xywh(dets.boxes[idx])
        h = np.maximum(x[:, 3], 1.0)
        std = np.concatenate(
            [
                np.repeat((2 * _STD_POS * h)[:, None], 4, 1),
                np.repeat((10 * _STD_VEL * h)[:, None], 4, 1),
            ],
            axis=1,
        )
        p = np.zeros((n, 8, 8), np.float64)
        p[:, range(8), range(8)] = std**2
        self._x = np.concatenate([self._x, x])
        self._p = np.concatenate([self._p, p])
        self._frame = np.concatenate([self._frame, np.full(n, frame, np.int64)])
        self._seen = np.concatenate([self._seen, np.full(n, frame, np.int64)])
        self._hits = np.concatenate([self._hits, np.ones(n, np.int64)])
        self._ids = np.concatenate([self._ids, ids])
        self._cls = np.concatenate([self._cls, dets.class_ids[idx].astype(np.int32)])
        self._score = np.concatenate([self._score, dets.scores[idx].astype(np.float32)])
        self._obs = np.concatenate([self._obs, dets.boxes[idx].astype(np.float32)])
        return ids

    def clear(self) -> tuple[int, ...]:
        """Drop every track (a scene change: the scene they were in is gone); their ids.
        Ids keep counting, so a new track never reuses an old one's id."""
        gone = self._drop(np.zeros(len(self), bool))
        if self.looks is not None:
            self.looks.forget(gone)
        return gone

    def _retire(self, frame: int) -> tuple[int, ...]:
        """Drop the tracks unseen for more than `max_lost` frames; their ids."""
        life = self.cfg.max_lost
        if self.looks is not None:
            life = max(life, self.looks.cfg.relink_frames)
        keep = frame - self._seen <= life
        if keep.all():
            return ()
        return self._drop(keep)

    def _drop(self, keep: np.ndarray) -> tuple[int, ...]:
        gone = tuple(int(i) for i in self._ids[~keep].tolist())
        self._x, self._p = self._x[keep], self._p[keep]
        self._frame, self._seen = self._frame[keep], self._seen[keep]
        self._hits, self._ids = self._hits[keep], self._ids[keep]
        self._cls, self._score = self._cls[keep], self._score[keep]
        self._obs = self._obs[keep]
        return gone
