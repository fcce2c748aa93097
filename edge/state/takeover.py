"""Taking over cameras from another edge: a frame whose `previous_edge` names a peer
means its camera moved here (that peer failed, or the ring was rebalanced). Before the
frame is checked, every `MovablePart` restores what the peer's checkpoint and journal
hold for the camera: settled frames (their resends get their final status), its tracker,
its per-camera counters, its rules' state (tracks' rule state, counts, event sequence);
and the peer's uplink spool is drained here once. The camera is then marked handed over
beside the peer's checkpoint (edge/state/checkpoint.py).

Ingest thread only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from strata.edge.state.checkpoint import Checkpointer, PeerCheckpointError
from strata.shared.contracts import frame_pb2

log = logging.getLogger(__name__)

Precheck = Callable[[frame_pb2.FrameHeader], frame_pb2.FrameAck | None]


class Takeover:
    """Restores moved cameras through the parts, then hands the frame to `then`."""

    def __init__(self, edge_id: str, checkpointer: Checkpointer, then: Precheck) -> None:
        self.edge_id = edge_id
        # Its registered parts that restore a moved camera (MovablePart) do the work.
        self.checkpointer = checkpointer
        self.then = then
        # The peer whose checkpoint was restored for each camera moved here.
        self.taken_over: dict[str, str] = {}

    def precheck(self, h: frame_pb2.FrameHeader) -> frame_pb2.FrameAck | None:
        """Delivery's precheck, after restoring a moved camera's state."""
        prev = h.previous_edge
        if prev and prev != self.edge_id and self.taken_over.get(h.camera_id) != prev:
            self.take_over(h.camera_id, prev)
        return self.then(h)

    def forget_cameras(self, cameras: list[str]) -> None:
        for cam in cameras:
            self.taken_over.pop(cam, None)

    def take_over(self, camera: str, peer: str) -> None:
        """Restore what `peer`'s checkpoint and journal hold for `camera`."""
        self.taken_over[camera] = peer
        m = self.checkpointer.metrics
        try:
            state = self.checkpointer.load_peer(peer, {camera})
        except PeerCheckpointError as exc:
            m.taken_over.labels("refused").inc()
            log.error("camera %s moved here from edge %s: %s; it starts clean", camera, peer, exc)
            return
        if state is None:
            where = self.checkpointer.cfg.dir
            m.taken_over.labels("none").inc()
            log.info(
                "camera %s moved here from edge %s: no checkpoint of it%s; it starts clean",
                camera,
                peer,
                f" in {where}" if where else " (no checkpoint.dir set)",
            )
            return
        data = self.checkpointer.peer_parts(state, camera)
        parts = self.checkpointer.movable()
        done = {p.name: p.take_over(data[p.name], camera, peer) for p in parts if p.name in data}
        # Its counters are carried on here now: the peer must not restore them again.
        self.checkpointer.mark_handed_over(peer, state.body.written_unix, camera)
        m.taken_over.labels("checkpoint").inc()
        m.taken_over_frames.inc(done.get("streams", 0))
        log.warning(
            "camera %s moved here from edge %s: restored its checkpoint (written %s) and "
            "journal (%d journaled frame(s)): %s",
            camera,
            peer,
            time.strftime("%H:%M:%S", time.localtime(state.body.written_unix))
            if state.body.written_unix
            else "never",
            state.journal_frames,
            ", ".join(f"{name} {n}" for name, n in done.items()),
        )
