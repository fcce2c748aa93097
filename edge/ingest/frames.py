"""A frame as it travels from ingest to the detector: compressed until a worker decodes it.

Ingest queues the payload as received (a view of the ZeroMQ message, no copy) after
checking its header and the JPEG's own dimensions; only a frame taken for a batch is
decoded, in the worker pool, so a frame shed or expired in the queue never costs a decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.imagecheck import InvalidImageError


@dataclass(frozen=True, slots=True)
class QueuedFrame:
    """A checked, still encoded frame: its header, payload view and receive times."""

    header: frame_pb2.FrameHeader
    payload: memoryview
    receive_ns: int
    # time.monotonic() at receipt: what queue delays are measured against.
    received: float
    # The sending agent's ROUTER identity: where the final ack goes.
    identity: bytes = b""
    # The agent resent it and this node has no record: it may have been published before.
    redelivery: bool = False

    def decode(self) -> np.ndarray:
        """BGR image: a zero-copy view for raw BGR, cv2.imdecode for JPEG.

        Ingest has checked the size (the JPEG's SOF against the header and the limits), so
        the decoder allocates at most what the limits allow. InvalidImageError on failure.
        """
        h, w = self.header.height, self.header.width
        data = np.frombuffer(self.payload, np.uint8)
        if self.header.encoding == common_pb2.ENCODING_BGR:
            return data.reshape(h, w, 3)
        import cv2

        image = cv2.imdecode(data, cv2.IMREAD_COLOR)
        if image is None:
            raise InvalidImageError("undecodable", "JPEG payload does not decode")
        if image.shape[:2] != (h, w):  # the SOF check makes this unreachable; kept as a guard
            raise InvalidImageError(
                "jpeg_dimensions", f"JPEG decoded to {image.shape[1]}x{image.shape[0]}, not {w}x{h}"
            )
        return np.asarray(image)


@dataclass(frozen=True, slots=True)
class DecodedFrame:
    """A queued frame taken for a batch, with its decoded BGR image."""

    frame: QueuedFrame
    image: np.ndarray

    @property
    def header(self) -> frame_pb2.FrameHeader:
        return self.frame.header
