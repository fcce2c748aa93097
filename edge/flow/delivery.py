"""The node's side of delivery: which ack each frame gets, and when.

On receipt a frame gets one of: QUEUED (taken; non-final, frees nothing on the agent),
BUSY (over its camera's credit; not taken, retry after N ms), DUPLICATE (already
processed in this node's life), QUEUED again (a resend of a frame still held), or the
final status it already had. When the worker has published its result the frame gets its
final ack, PROCESSED (or SHED/REJECTED with a reason when it could not be processed).

A frame the agent marks `resent` that the node has no record of may have been published
by a previous life of this node (it died between publishing and acking): its result is
flagged `redelivery`. Every ack carries the camera's credit, the node's pressure and the
degradation level asked of the camera; the first ack of a stream and the answer to any
resent frame also carry EdgeInfo, whose `edge_session` tells the agent the node restarted.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from strata.edge.flow.credits import CreditGate, CreditLimits, Grant
from strata.edge.flow.ledger import DeliveryLedger, Seen, StreamKey
from strata.edge.metrics import EdgeMetrics
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.wire import make_ack


@dataclass(frozen=True, slots=True)
class Served:
    """What the node announces it serves (EdgeInfo): the model and its input size; and the
    batches its runner holds at once (slots), which the credits keep fed."""

    model_name: str = ""
    model_input: tuple[int, int] = (0, 0)
    max_batch: int = 1
    slots: int = 1


def _needs_credit(h: frame_pb2.FrameHeader) -> bool:
    # A header-only SKIPPED notice holds no pixels and no detector time: no credit.
    return h.kind != frame_pb2.FRAME_KIND_SKIPPED


def _h264(h: frame_pb2.FrameHeader) -> bool:
    return h.encoding == common_pb2.ENCODING_H264 and _needs_credit(h)


def stream_key(header: frame_pb2.FrameHeader) -> StreamKey:
    """(session_id, camera_id): what sequences belong to."""
    return (header.session_id, header.camera_id)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A frame the node took: its QUEUED ack and whether its result is a redelivery."""

    ack: frame_pb2.FrameAck
    redelivery: bool


class Delivery:
    """Ledger (what was seen) plus credits (what may be taken), turned into acks."""

    def __init__(
        self,
        cfg: EdgeConfig,
        served: Served,
        metrics: EdgeMetrics,
        limits: CreditLimits | None = None,
        edge_session: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.edge_session = edge_session or (secrets.randbits(63) | 1)
        self.ledger = DeliveryLedger(cfg.flow.settled_per_stream, cfg.flow.stream_idle_s)
        flow = cfg.flow
        if flow.batches_in_node and flow.batches_in_node < served.slots + 1:
            # The floor keeps every runner slot's batch in service and the next one queued.
            flow = flow.model_copy(update={"batches_in_node": float(served.slots + 1)})
        self.credits = CreditGate(
            flow,
            cfg.batching.delay_target_ms / 1e3,
            served.max_batch,
            cfg.batching.queue_per_camera,
            limits=limits,
        )
        self.model_name = served.model_name
        self.model_input = served.model_input
        # The earliest H.264 unit of each stream answered BUSY: later ones are refused too
        # until it (or a keyframe) is taken, so the agent's resends arrive in stream order
        # (a P-frame taken before the unit it refers to cannot be decoded).
        self._h264_gap: dict[StreamKey, int] = {}

    def edge_info(self) -> frame_pb2.EdgeInfo:
        """What this node announces about itself."""
        return frame_pb2.EdgeInfo(
            edge_id=self.cfg.edge_id,
            edge_session=self.edge_session,
            capacity_fps=self.credits.capacity.fps,
            weight=self.cfg.weight,
            models=[self.model_name] if self.model_name else [],
            model_input_width=self.model_input[0],
            model_input_height=self.model_input[1],
            accepting=True,
        )

    def heartbeat(self, h: frame_pb2.FrameHeader) -> frame_pb2.FrameAck:
        """The answer to an agent's heartbeat: status HEARTBEAT and this node's EdgeInfo."""
        ack = make_ack(
            h.camera_id, h.sequence, frame_pb2.ACK_STATUS_HEARTBEAT, session_id=h.session_id
        )
        ack.edge.CopyFrom(self.edge_info())
        return ack

    def _ack(
        self, h: frame_pb2.FrameHeader, status: int, grant: Grant, reason: str = ""
    ) -> frame_pb2.FrameAck:
        ack = make_ack(h.camera_id, h.sequence, status, reason, h.session_id, grant.retry_after_ms)
        ack.credits = grant.credits
        ack.pressure = grant.pressure
        ack.degrade_level = grant.degrade_level
        return ack

    def precheck(self, h: frame_pb2.FrameHeader) -> frame_pb2.FrameAck | None:
        """Before decoding: the answer for a frame the node will not take, else None.

        Takes nothing: `admit` does, after the frame has decoded. (One ingest thread calls
        both, so the credit seen free here is still free there.)
        """
        key = stream_key(h)
        seen = self.ledger.lookup(key, h.sequence)
        cam = h.camera_id
        if seen.seen is Seen.PENDING:
            self.metrics.frames.labels("requeued").inc()
            return self._with_info(
                self._ack(h, frame_pb2.ACK_STATUS_QUEUED, self.credits.grant(cam)), h
            )
        if seen.seen is Seen.SETTLED:
            self.metrics.frames.labels("duplicate").inc()
            status = (
                frame_pb2.ACK_STATUS_DUPLICATE
                if seen.status == frame_pb2.ACK_STATUS_PROCESSED
                else seen.status
            )
            return self._ack(h, status, self.credits.grant(cam), seen.reason)
        if (_needs_credit(h) and not self.credits.has_room(cam)) or self._after_gap(key, h):
            self.metrics.frames.labels("busy").inc()
            self._note_busy(key, h)
            return self._with_info(
                self._ack(h, frame_pb2.ACK_STATUS_BUSY, self.credits.busy(cam)), h
            )
        return None

    def _after_gap(self, key: StreamKey, h: frame_pb2.FrameHeader) -> bool:
        gap = self._h264_gap.get(key)
        return gap is not None and _h264(h) and not h.keyframe and h.stream_index > gap

    def _note_busy(self, key: StreamKey, h: frame_pb2.FrameHeader) -> None:
        if _h264(h):
            gap = self._h264_gap.get(key)
            if gap is None or h.stream_index < gap:
                self._h264_gap[key] = h.stream_index

    def forget_cameras(self, cameras: list[str]) -> None:
        """Drop what is kept about these (idle) cameras."""
        self.ledger.forget_cameras(cameras)
        gone = set(cameras)
        for key in [k for k in self._h264_gap if k[1] in gone]:
            del self._h264_gap[key]

    def admit(self, h: frame_pb2.FrameHeader) -> Admitted:
        """Take a decoded frame that passed `precheck`: pending until `settle`."""
        key = stream_key(h)
        first = self.ledger.is_new_stream(key)
        grant = (
            self.credits.try_admit(h.camera_id)
            if _needs_credit(h)
            else self.credits.grant(h.camera_id)
        )
        if grant is None:  # only if the config changed under us; never silently
            grant = self.credits.busy(h.camera_id)
            self.metrics.frames.labels("busy").inc()
            self._note_busy(key, h)
            ack = self._ack(h, frame_pb2.ACK_STATUS_BUSY, grant)
            return Admitted(ack, False)
        self.ledger.add(key, h.sequence)
        gap = self._h264_gap.get(key)
        if gap is not None and (h.keyframe or h.stream_index == gap):
            del self._h264_gap[key]
        ack = self._ack(h, frame_pb2.ACK_STATUS_QUEUED, grant)
        if first:
            ack.edge.CopyFrom(self.edge_info())
        return Admitted(self._with_info(ack, h), h.resent)

    def refuse(self, h: frame_pb2.FrameHeader) -> frame_pb2.FrameAck:
        """Undo `admit` (the camera's queue was full after all): BUSY, counted."""
        self.ledger.withdraw(stream_key(h), h.sequence)
        if _needs_credit(h):
            self.credits.release(h.camera_id)
        self.metrics.frames.labels("busy").inc()
        self._note_busy(stream_key(h), h)
        return self._ack(h, frame_pb2.ACK_STATUS_BUSY, self.credits.busy(h.camera_id))

    def settle(self, h: frame_pb2.FrameHeader, status: int, reason: str = "") -> frame_pb2.FrameAck:
        """The final ack of a taken frame (its result published, or why not)."""
        self.ledger.settle(stream_key(h), h.sequence, status, reason)
        if _needs_credit(h):
            self.credits.release(h.camera_id)
        return self._ack(h, status, self.credits.grant(h.camera_id), reason)

    def _with_info(self, ack: frame_pb2.FrameAck, h: frame_pb2.FrameHeader) -> frame_pb2.FrameAck:
        if h.resent and not ack.HasField("edge"):
            ack.edge.CopyFrom(self.edge_info())
        return ack
