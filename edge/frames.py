"""A frame the node has accepted, as it travels from ingest to the detector."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from strata.shared.contracts import frame_pb2


@dataclass(frozen=True, slots=True)
class QueuedFrame:
    """Decoded BGR image (a view of the received part when raw) plus its header and times."""

    header: frame_pb2.FrameHeader
    image: np.ndarray
    receive_ns: int
    # time.monotonic() at receipt: what queue delays are measured against.
    received: float
