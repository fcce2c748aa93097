"""One cloud look per object: which tracked detections get a crop for the cloud.

A track gets a crop when it is new (first detected with a score in the uncertain band)
and again only after `track_interval_s` of capture time AND a large change (its box now
overlaps the box last sent by less than `track_change_iou`, or its score moved by more
than `track_score_change`), at most `max_per_track` times. A parked object does not
change, so it is never sent twice; nor is a track the rules stage calls stationary
(`stationary`, strata.edge.rules.stage) until it moves. Untracked detections (track id
0) follow the old rule: every kept frame, by score band.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from strata.shared.config.edge import CropsConfig
from strata.shared.vision import iou


@dataclass(slots=True)
class _Look:
    box: np.ndarray
    score: float
    time_s: float
    count: int
    seen_s: float


class TrackLooks:
    """Per (session, camera) track: what was last sent. Forgets tracks idle for long."""

    def __init__(
        self,
        cfg: CropsConfig,
        forget_s: float = 300.0,
        stationary: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.cfg = cfg
        self.forget_s = forget_s
        # (camera, track id) -> the track is stationary now: no look until it moves.
        self.stationary = stationary
        self.skipped_stationary = 0
        self._lock = threading.Lock()
        self._looks: dict[tuple[int, str, int], _Look] = {}
        self.skipped_parked = 0
        self.skipped_cap = 0

    def __len__(self) -> int:
        return len(self._looks)

    def want(
        self,
        session: int,
        camera: str,
        track_ids: np.ndarray,
        boxes: np.ndarray,
        scores: np.ndarray,
        candidates: np.ndarray,
        time_s: float,
        limit: int,
    ) -> np.ndarray:
        """Of the `candidates` (indices that passed class and band, best first), at most
        `limit` to send now; those are recorded as sent."""
        cfg = self.cfg
        out: list[int] = []
        with self._lock:
            for i in candidates.tolist():
                if len(out) >= limit:
                    break
                tid = int(track_ids[i])
                if tid == 0:
                    out.append(i)
                    continue
                if self.stationary is not None and self.stationary(camera, tid):
                    self.skipped_stationary += 1
                    continue
                key = (session, camera, tid)
                look = self._looks.get(key)
                if look is None:
                    self._looks[key] = _Look(boxes[i].copy(), float(scores[i]), time_s, 1, time_s)
                    out.append(i)
                    continue
                look.seen_s = time_s
                if look.count >= cfg.max_per_track:
                    self.skipped_cap += 1
                    continue
                if time_s - look.time_s < cfg.track_interval_s:
                    continue
                moved = float(iou(look.box[None], boxes[i][None])[0, 0]) < cfg.track_change_iou
                rescored = abs(float(scores[i]) - look.score) > cfg.track_score_change
                if not (moved or rescored):
                    self.skipped_parked += 1
                    continue
                look.box, look.score, look.time_s = boxes[i].copy(), float(scores[i]), time_s
                look.count += 1
                out.append(i)
            if len(self._looks) > 4096:
                self._forget(time_s)
        return np.array(out, np.int64)

    def _forget(self, now_s: float) -> None:
        old = [k for k, v in self._looks.items() if now_s - v.seen_s > self.forget_s]
        for k in old:
            del self._looks[k]
