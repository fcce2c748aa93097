"""What tracking hands forward: one frame's tracked result, and the seam where stages
between tracking and publish plug in.

The worker passes each detected frame's `TrackedFrame` through the node's
`after_tracking` stages, in order, then to publish (strata.edge.publish.results). Today
there are none; the rules stage (zones, lines, dwell on track paths) goes here: a
`TrackedStage` that reads the tracks and returns the frame, with what it adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from strata.edge.ingest.frames import DecodedFrame
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.vision import FrameBoxes


@dataclass(frozen=True, slots=True)
class TrackedFrame:
    """A frame's boxes in source pixels with their tracks, and when inference ran.

    `image_boxes` are the same boxes in the decoded image's pixels (what crops are cut
    with); `predicted`: not detected but answered (from cache), so no crops."""

    decoded: DecodedFrame
    boxes: FrameBoxes
    tracked: TrackedBoxes | None
    start_ns: int
    end_ns: int
    image_boxes: FrameBoxes | None = None
    predicted: bool = False


class TrackedStage(Protocol):
    """A stage between tracking and publish: takes a tracked frame, hands one forward."""

    def __call__(self, frame: TrackedFrame) -> TrackedFrame: ...
