"""Better labels than any one teacher: fuse teachers per frame, then track over time.

Per frame, detector boxes (HOG, a model) are merged, and a motion blob that lies inside a
detector box replaces it when it covers the person (blobs are tighter than HOG windows).
Motion blobs nobody explains become candidates of their own. Over time, an IoU tracker links
the candidates; a track survives only if it lasts and a detector confirmed it (or, for
motion-only tracks, it lasts long); short gaps are filled by interpolation and one-frame
blips are dropped, so a person HOG misses for a few frames stays labelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from strata.shared.vision.boxes import area, greedy_pairs, intersection, iou
from strata.tools.distill.boxes import SOURCE_FILLED, SOURCE_MOTION, Detections


@dataclass(frozen=True, slots=True)
class FusionSettings:
    """How detector boxes and motion blobs combine, and what a track needs to be kept."""

    nms_iou: float = 0.45
    blob_inside: float = 0.6  # share of a blob's area inside a detector box to belong to it
    blob_explained: float = 0.25  # share inside any detector box to be dropped as a part
    blob_min_height: float = 0.6  # blob union height / detector box height to replace it
    detector_solo_score: float = 0.9  # detector boxes with no blob need at least this score
    track_iou: float = 0.3
    match_widen: float = 1.6  # boxes are scaled by this before frame-to-frame IoU
    max_gap: int = 5
    min_track: int = 4
    min_detector_hits: int = 2
    motion_only_min_track: int = 12  # 0 disables motion-only tracks
    motion_min_aspect: float = 1.2  # height / width of a motion-only track (people stand)
    smooth: int = 1  # +- frames of box averaging along a track


def _nms_merge(dets: Detections, thr: float) -> Detections:
    """Greedy NMS that ORs the sources of suppressed boxes into the survivor."""
    if len(dets) <= 1:
        return dets
    order = np.argsort(-dets.scores)
    boxes = dets.xyxy[order]
    sources = dets.sources[order].copy()
    overlaps = iou(boxes, boxes)
    alive = np.ones(len(order), bool)
    for i in range(len(order)):
        if not alive[i]:
            continue
        dup = alive & (overlaps[i] >= thr)
        dup[i] = False
        sources[i] |= np.bitwise_or.reduce(sources[dup]) if dup.any() else 0
        alive &= ~dup
    return Detections(boxes[alive], dets.scores[order][alive], sources[alive])


def fuse_frame(detectors: Detections, blobs: Detections, s: FusionSettings) -> Detections:
    """One frame's candidates from detector boxes (HOG/model) and motion blobs."""
    dets = _nms_merge(detectors, s.nms_iou)
    if len(blobs) == 0:
        return dets.select(dets.scores >= s.detector_solo_score)
    if len(dets) == 0:
        return blobs
    inside = intersection(blobs.xyxy, dets.xyxy) / np.maximum(area(blobs.xyxy), 1.0)[:, None]
    owner = inside.argmax(axis=1)
    owned = inside[np.arange(len(blobs)), owner] >= s.blob_inside
    out_boxes = dets.xyxy.copy()
    out_sources = dets.sources.copy()
    keep = dets.scores >= s.detector_solo_score
    for d in np.unique(owner[owned]):
        mine = blobs.xyxy[owned & (owner == d)]
        union = np.array(
            [mine[:, 0].min(), mine[:, 1].min(), mine[:, 2].max(), mine[:, 3].max()], np.float32
        )
        keep[d] = True  # motion confirms a weak detector box
        out_sources[d] |= SOURCE_MOTION
        dh = dets.xyxy[d, 3] - dets.xyxy[d, 1]
        if union[3] - union[1] >= s.blob_min_height * dh:
            out_boxes[d] = union
    explained = inside.max(axis=1) >= s.blob_explained
    loose = blobs.select(~explained)
    merged = Detections(out_boxes[keep], dets.scores[keep], out_sources[keep])
    return Detections.concat([merged, loose])


@dataclass(slots=True)
class _Track:
    frames: list[int] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)

    @property
    def last(self) -> int:
        return self.frames[-1]


def _predict(t: _Track, f: int) -> np.ndarray:
    """Where a track's box should be at frame f, at constant velocity."""
    if len(t.frames) < 2:
        return t.boxes[-1]
    step = (t.boxes[-1] - t.boxes[-2]) / float(t.frames[-1] - t.frames[-2])
    return np.asarray(t.boxes[-1] + step * float(f - t.frames[-1]), np.float32)


def _widen(xyxy: np.ndarray, factor: float) -> np.ndarray:
    """Boxes scaled about their centres: small fast walkers overlap from frame to frame."""
    c = (xyxy[:, :2] + xyxy[:, 2:]) / 2
    half = (xyxy[:, 2:] - xyxy[:, :2]) * (factor / 2)
    return np.concatenate([c - half, c + half], axis=1)


def _link(candidates: list[Detections], s: FusionSettings) -> list[_Track]:
    """Greedy IoU association frame to frame; a track ends after max_gap missed frames."""
    done: list[_Track] = []
    active: list[_Track] = []
    for f, dets in enumerate(candidates):
        still = [t for t in active if f - t.last <= s.max_gap + 1]
        done.extend(t for t in active if f - t.last > s.max_gap + 1)
        active = still
        free = np.ones(len(dets), bool)
        if active and len(dets):
            predicted = np.stack([_predict(t, f) for t in active])
            m = iou(_widen(predicted, s.match_widen), _widen(dets.xyxy, s.match_widen))
            for ti, di in zip(*greedy_pairs(m, s.track_iou), strict=True):
                t = active[ti]
                t.frames.append(f)
                t.boxes.append(dets.xyxy[di])
                t.sources.append(int(dets.sources[di]))
                free[di] = False
        for di in np.flatnonzero(free):
            active.append(_Track([f], [dets.xyxy[di]], [int(dets.sources[di])]))
    return done + active


def _accept(t: _Track, s: FusionSettings) -> bool:
    if len(t.frames) < s.min_track:
        return False
    detector_hits = sum(1 for src in t.sources if src & ~SOURCE_MOTION & ~SOURCE_FILLED)
    if detector_hits >= s.min_detector_hits:
        return True
    if s.motion_only_min_track <= 0 or len(t.frames) < s.motion_only_min_track:
        return False
    b = np.stack(t.boxes)
    aspect = np.median((b[:, 3] - b[:, 1]) / np.maximum(b[:, 2] - b[:, 0], 1.0))
    return bool(aspect >= s.motion_min_aspect)


def _densify(t: _Track, s: FusionSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames, boxes, sources of a track with gaps interpolated and boxes smoothed."""
    frames = np.asarray(t.frames)
    boxes = np.stack(t.boxes).astype(np.float32)
    full = np.arange(frames[0], frames[-1] + 1)
    dense = np.stack([np.interp(full, frames, boxes[:, k]) for k in range(4)], axis=1)
    src = np.full(full.shape[0], SOURCE_FILLED, np.uint8)
    src[frames - frames[0]] = np.asarray(t.sources, np.uint8)
    if s.smooth > 0 and dense.shape[0] > 2 * s.smooth:
        k = 2 * s.smooth + 1
        padded = np.pad(dense, ((s.smooth, s.smooth), (0, 0)), mode="edge")
        kernel = np.ones(k, np.float32) / k
        dense = np.stack([np.convolve(padded[:, c], kernel, "valid") for c in range(4)], axis=1)
    return full, dense.astype(np.float32), src


@dataclass(frozen=True, slots=True)
class TrackStats:
    """What the tracker did, for the model card."""

    candidates: int
    tracks: int
    tracks_kept: int
    boxes_filled: int


def track_labels(
    candidates: list[Detections], s: FusionSettings
) -> tuple[list[Detections], TrackStats]:
    """Per-frame final labels from per-frame candidates."""
    tracks = _link(candidates, s)
    n = len(candidates)
    per_frame: list[list[tuple[np.ndarray, int]]] = [[] for _ in range(n)]
    kept = filled = 0
    for t in tracks:
        if not _accept(t, s):
            continue
        kept += 1
        frames, boxes, src = _densify(t, s)
        filled += int(np.count_nonzero(src == SOURCE_FILLED))
        for f, b, sr in zip(frames.tolist(), boxes, src.tolist(), strict=True):
            per_frame[f].append((b, sr))
    out = [
        Detections(
            np.stack([b for b, _ in items]).astype(np.float32),
            np.ones(len(items), np.float32),
            np.asarray([sr for _, sr in items], np.uint8),
        )
        if items
        else Detections.empty()
        for items in per_frame
    ]
    stats = TrackStats(sum(len(c) for c in candidates), len(tracks), kept, filled)
    return out, stats
