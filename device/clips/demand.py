"""The edge's clip demand (FrameAck.clips), applied to each camera's clip cutter.

The demand is state, not deltas: the camera's live tracks (end 0) and those that ended
lately (with their end), sent whole when it changes and every few seconds. Applied to a
camera's cutter (`DemandFollower.apply`):
  - a track new to the device and live opens a clip of its own (overlapping tracks each
    get theirs, cut to their own span: ClipInfo.track_uids names the one track);
  - a live track that now has an end (its last seen time) ends its clip post_roll_s
    later, cut back to there when the clip, written live, already ran past it (the edge
    ends a track only the tracker's lost wait after it was last seen: ClipCutter);
  - a track new to the device that has already ended is asked for whole (start to end);
  - a live track that vanished from the demand (the edge forgot it: a restart without
    its checkpoint, a camera forgotten) is ended at the capture time of the newest frame
    the device had when the demand last named it.
A track the device has handled (ended, or served by a clip of a previous run: the clip
spool's `served`) is never cut twice; the last `REMEMBERED` are kept per camera.

Acks arrive on the sender's thread; applying a demand may catch a clip up from the ring
(muxing seconds of packets), so `DemandQueue` hands each camera's latest demand to a
thread of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from strata.shared.contracts import frame_pb2

from .cutter import ClipCutter, ClipRequest

log = logging.getLogger(__name__)

# Tracks remembered per camera as handled (ended or served), the oldest forgotten first.
REMEMBERED = 4096


class DemandFollower:
    """One camera's demand applied to its cutter (see the module docstring)."""

    def __init__(self, cutter: ClipCutter, served: Iterable[str] = ()) -> None:
        self.cutter = cutter
        # Live track -> capture ns of the newest frame when the demand last named it.
        self.live: dict[str, int] = {}
        self.handled: OrderedDict[str, None] = OrderedDict((uid, None) for uid in served)
        self.vanished = 0  # live tracks ended because the demand dropped them

    def apply(self, demand: Sequence[frame_pb2.ClipDemand]) -> None:
        """Follow the camera's whole current demand."""
        now_ns = self.cutter.ring.clock.latest_ns
        named = set()
        for d in demand:
            uid = d.track_uid
            named.add(uid)
            if not uid or uid in self.handled:
                continue
            if d.end_ns:
                self._ended(uid, d.start_ns, d.end_ns)
            elif uid in self.live:
                self.live[uid] = now_ns or self.live[uid]
            else:
                self.cutter.open_track(uid, d.start_ns)
                self.live[uid] = now_ns or d.start_ns
        for uid in [u for u in self.live if u not in named]:
            last = self.live.pop(uid)
            self.vanished += 1
            log.info(
                "camera %s: track %s left the clip demand while live: its clip ends at the "
                "last frame seen with it",
                self.cutter.ring.camera_id,
                uid,
            )
            self.cutter.end_track(uid, last)
            self._handled(uid)

    def _ended(self, uid: str, start_ns: int, end_ns: int) -> None:
        if uid in self.live:
            del self.live[uid]
            self.cutter.end_track(uid, end_ns)
        else:
            self.cutter.request(ClipRequest(start_ns, max(start_ns, end_ns), uid))
        self._handled(uid)

    def _handled(self, uid: str) -> None:
        self.handled[uid] = None
        while len(self.handled) > REMEMBERED:
            self.handled.popitem(last=False)


class DemandQueue:
    """Each camera's latest demand from the acks (sender thread), applied on a thread of
    its own; a newer demand replaces one not yet applied (it is the whole state)."""

    def __init__(self, followers: dict[str, DemandFollower]) -> None:
        self.followers = followers
        self._latest: dict[str, list[frame_pb2.ClipDemand]] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="clip-demand", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def on_ack(self, ack: frame_pb2.FrameAck) -> None:
        """Sender thread: keep the demand an ack carries, if it carries one."""
        if not ack.clips_set or ack.camera_id not in self.followers:
            return
        with self._cond:
            self._latest[ack.camera_id] = list(ack.clips)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._latest and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                latest, self._latest = self._latest, {}
            for camera_id, demand in latest.items():
                try:
                    self.followers[camera_id].apply(demand)
                except Exception:  # one camera's clip trouble is not the others'
                    log.exception("camera %s: clip demand not applied", camera_id)

    def stop(self) -> None:
        """Stop applying (demands not yet applied are let go: the cameras have stopped)."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(5.0)
