"""What tracking hands forward: one frame's tracked result, and the seam where stages
between tracking and publish plug in.

The worker passes each camera's answered frames, in capture order, through the node's
`after_tracking` stages, then to publish (strata.edge.publish.results): a detected frame
as a `TrackedFrame`, a frame the device dropped (answered by tracking's prediction) as an
`AnsweredFrame`. The rules stage (strata.edge.rules.stage: zones, lines, dwell on track
paths) is one: it reads the tracks and hands the frame forward with the track events it
caused, which publish sends on (a copy on the PUB socket, the durable uplink).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from strata.edge.ingest.frames import DecodedFrame
from strata.edge.tracking.answers import Answer
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.contracts import events_pb2
from strata.shared.vision import FrameBoxes


@dataclass(frozen=True, slots=True)
class TrackedFrame:
    """A frame's boxes in source pixels with their tracks, and when inference ran.

    `image_boxes` are the same boxes in the decoded image's pixels (what crops are cut
    with); `predicted`: not detected but answered (from cache), so no crops; `events`:
    what the stages after tracking caused, for publish to send on; `snapshots`: track
    snapshots (edge/publish/snapshots.py) publish hands the uplink before the events."""

    decoded: DecodedFrame
    boxes: FrameBoxes
    tracked: TrackedBoxes | None
    start_ns: int
    end_ns: int
    image_boxes: FrameBoxes | None = None
    predicted: bool = False
    events: tuple[events_pb2.TrackEvent, ...] = ()
    snapshots: tuple[events_pb2.Snapshot, ...] = ()


@dataclass(frozen=True, slots=True)
class AnsweredFrame:
    """A frame the device dropped, answered by tracking, and the events (and snapshots of
    ending tracks) it caused."""

    answer: Answer
    events: tuple[events_pb2.TrackEvent, ...] = ()
    snapshots: tuple[events_pb2.Snapshot, ...] = ()


class TrackedStage(Protocol):
    """A stage between tracking and publish: takes a frame, hands one forward."""

    def __call__(self, frame: TrackedFrame) -> TrackedFrame: ...

    def answered(self, frame: AnsweredFrame) -> AnsweredFrame: ...
