"""What the sender is built with and keeps per camera: its setup, its hooks, the camera's
sending state (strata.device.transport.sender runs them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from strata.shared.config.device import RoutingConfig
from strata.shared.contracts import frame_pb2

from ..metrics import CameraMetrics, DropLog
from .degrade import SourceDegrader
from .outbox import Outbox

# (camera id, the frame's header, the final ack) for each settled frame.
FinalHook = Callable[[str, frame_pb2.FrameHeader, frame_pb2.FrameAck], None]
# (camera id, new edge endpoint) for each camera that moved from one edge to another (e.g.
# to ask for a keyframe); not called for a camera's first edge.
MoveHook = Callable[[str, str], None]


class SenderCamera:
    """One camera's sending state (the sender thread alone changes it)."""

    __slots__ = (
        "box",
        "degrader",
        "drop_log",
        "edge",
        "m",
        "overflow_log",
        "previous_edge",
        "shown_credits",
        "shown_inflight",
        "shown_level",
        "shown_spooled",
    )

    def __init__(
        self,
        box: Outbox,
        m: CameraMetrics,
        overflow_log: DropLog,
        drop_log: DropLog,
        degrader: SourceDegrader,
    ) -> None:
        self.box, self.m, self.overflow_log = box, m, overflow_log
        self.drop_log, self.degrader = drop_log, degrader
        # The edge endpoint this camera sends to (None: no edge up yet).
        self.edge: str | None = None
        # The edge id that served it before its last move (stamped on every frame after),
        # so the new edge restores that edge's checkpoint for it; "" before any move.
        self.previous_edge = ""
        # What the camera's gauges show (-1: not set yet); this thread alone sets them.
        self.shown_level = self.shown_spooled = self.shown_inflight = self.shown_credits = -1


@dataclass(frozen=True, slots=True)
class SenderSetup:
    """The agent's side of the link: how its cameras are placed on edges (routing, with the
    agent id for affinity and heartbeats) and how its frames are numbered."""

    routing: RoutingConfig = field(default_factory=RoutingConfig)
    agent_id: str = ""
    # The sender session: sequences and duplicates belong to (session, camera). None: a new
    # random one.
    session_id: int | None = None
    # None: the start time in microseconds, so that a restarted agent continues above what
    # the edge saw from the previous run.
    first_sequence: int | None = None


@dataclass(frozen=True, slots=True)
class SenderHooks:
    """Whom the sender tells, each called on the sender thread (on_lost also on the
    submitting thread)."""

    # Every ack as it arrives, heartbeat answers too (their EdgeInfo sizes frames).
    on_ack: Callable[[frame_pb2.FrameAck], None] | None = None
    # A camera's frames (how many) given up before the edge had them: an H.264 stream needs
    # a keyframe, and the cascade's estimate does not cover them.
    on_lost: Callable[[str, int], None] | None = None
    # Every frame settled by a final ack.
    on_final: FinalHook | None = None
    # A camera moved from one edge to another.
    on_move: MoveHook | None = None


__all__ = ["FinalHook", "MoveHook", "SenderCamera", "SenderHooks", "SenderSetup"]
