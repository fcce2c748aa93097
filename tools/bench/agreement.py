"""The cascade's agreement measures live in strata.shared.vision.agreement (the edge's
online calibration uses them too); re-exported here for the bench."""

from strata.shared.vision.agreement import (
    Agreement,
    FrameBoxes,
    agreement,
    iou_matrix,
    matches,
    propagate,
)

__all__ = ["Agreement", "FrameBoxes", "agreement", "iou_matrix", "matches", "propagate"]
