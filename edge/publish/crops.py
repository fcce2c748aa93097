"""Choosing detections for a second opinion and cutting them out as JPEG crops."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence

import numpy as np
from strata.edge.ingest.frames import DecodedFrame
from strata.edge.publish.looks import TrackLooks
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.edge import CropsConfig
from strata.shared.contracts import analytics_pb2, common_pb2, frame_pb2
from strata.shared.vision import FrameBoxes


class CropSelector:
    """Picks boxes by class and score band (at most max_per_frame, most uncertain first)."""

    def __init__(
        self,
        cfg: CropsConfig,
        labels: Sequence[str],
        edge_id: str,
        stationary: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.cfg = cfg
        self.labels = tuple(labels)
        self.edge_id = edge_id
        wanted = set(cfg.classes)
        unknown = wanted - set(self.labels)
        if unknown:
            raise ValueError(f"crops.classes names labels the model does not have: {unknown}")
        # Boolean table by class id, so selection is one fancy-indexing step.
        self._eligible = np.array([not wanted or lb in wanted for lb in self.labels], bool)
        self._ids = itertools.count(1)
        # A token per run keeps crop ids unique across restarts of the node.
        self._run = uuid.uuid4().hex[:8]
        # `stationary`: (camera, track id) -> no cloud look now (the rules stage's).
        self.looks = TrackLooks(cfg, stationary=stationary)

    def select(
        self,
        boxes: FrameBoxes,
        tracks: TrackedBoxes | None = None,
        header: frame_pb2.FrameHeader | None = None,
    ) -> np.ndarray:
        """Indices of the chosen boxes; with `tracks`, one look per object (TrackLooks)."""
        if self.cfg.max_per_frame == 0 or len(boxes) == 0:
            return np.zeros((0,), np.int64)
        s = boxes.scores
        ok = (
            self._eligible[np.clip(boxes.class_ids, 0, len(self._eligible) - 1)]
            & (s >= self.cfg.score_min)
            & (s <= self.cfg.score_max)
        )
        idx = np.flatnonzero(ok)
        # Closest to the band's middle first: those are the ones the edge is least sure of.
        mid = (self.cfg.score_min + self.cfg.score_max) / 2
        idx = idx[np.argsort(np.abs(s[idx] - mid), kind="stable")]
        if tracks is None or header is None:
            return idx[: self.cfg.max_per_frame]
        t = header.capture_ns / 1e9 if header.capture_ns else time.time()
        return self.looks.want(
            header.session_id,
            header.camera_id,
            tracks.track_ids,
            tracks.boxes,
            s,
            idx,
            t,
            self.cfg.max_per_frame,
        )

    def crops(
        self,
        frame: DecodedFrame,
        boxes: FrameBoxes,
        detections: Sequence[common_pb2.Detection],
        tracks: TrackedBoxes | None = None,
    ) -> list[analytics_pb2.Crop]:
        """JPEG crops (padded, clipped to the frame) of the selected boxes.

        `boxes` are in the decoded image's pixels (what is cut); `tracks`, when given, are
        the same detections with their track ids (in source pixels).
        """
        import cv2

        chosen = self.select(boxes, tracks, frame.header)
        if chosen.size == 0:
            return []
        h, w = frame.image.shape[:2]
        b = boxes.boxes[chosen]
        pad = (b[:, 2:] - b[:, :2]) * self.cfg.pad
        x1y1 = np.floor(b[:, :2] - pad).astype(np.int64)
        x2y2 = np.ceil(b[:, 2:] + pad).astype(np.int64)
        np.clip(x1y1, 0, (w, h), out=x1y1)
        np.clip(x2y2, 0, (w, h), out=x2y2)
        out = []
        hdr = frame.header
        for i, (x1, y1), (x2, y2) in zip(
            chosen.tolist(), x1y1.tolist(), x2y2.tolist(), strict=True
        ):
            if x2 - x1 < 2 or y2 - y1 < 2:
                continue
            ok, jpg = cv2.imencode(
                ".jpg", frame.image[y1:y2, x1:x2], [cv2.IMWRITE_JPEG_QUALITY, self.cfg.jpeg_quality]
            )
            if not ok:
                continue
            out.append(
                analytics_pb2.Crop(
                    crop_id=f"{self.edge_id}-{self._run}:{hdr.camera_id}:{hdr.sequence}:{next(self._ids)}",
                    edge_id=self.edge_id,
                    camera_id=hdr.camera_id,
                    sequence=hdr.sequence,
                    detection=detections[i],
                    track_id=detections[i].track_id,
                    encoding=common_pb2.ENCODING_JPEG,
                    width=x2 - x1,
                    height=y2 - y1,
                    image=jpg.tobytes(),
                )
            )
        return out
