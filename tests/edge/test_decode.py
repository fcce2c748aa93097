"""Decoding a batch in the worker: real JPEG (cv2), raw BGR views and an H.264 stream from
the device's own encoder; what does not decode is counted, logged and handed back."""

from __future__ import annotations

import logging
import time

import cv2
import numpy as np
import pytest
from strata.device.transport.encoder import H264Encoder
from strata.edge.inference.decode import FrameDecoder
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

Rejected = tuple[int, str, str]


@pytest.fixture(scope="module")
def images() -> list[np.ndarray]:
    clip = SyntheticClip(width=160, height=120, frames=6, fps=10, objects=3, seed=3)
    return [clip.frame(i).image for i in range(len(clip))]


def queued(seq: int, image: np.ndarray, encoding: int, payload: bytes | None = None) -> QueuedFrame:
    """A frame as ingest queues it: header, payload view, receive times."""
    if payload is None:
        if encoding == common_pb2.ENCODING_JPEG:
            ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 95])
            assert ok
            payload = buf.tobytes()
        else:
            payload = np.ascontiguousarray(image).tobytes()
    h = frame_pb2.FrameHeader(
        camera_id="cam",
        sequence=seq,
        session_id=7,
        width=image.shape[1],
        height=image.shape[0],
        encoding=encoding,  # type: ignore[arg-type]
    )
    return QueuedFrame(h, memoryview(payload), time.time_ns(), time.monotonic())


def close_to(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()) < 6.0


def decoder(threads: int, rejected: list[Rejected]) -> tuple[FrameDecoder, EdgeMetrics]:
    metrics = EdgeMetrics()

    def on_reject(frame: QueuedFrame, reason: str, detail: str) -> None:
        rejected.append((frame.header.sequence, reason, detail))

    return FrameDecoder(metrics, threads, on_reject), metrics


@pytest.mark.parametrize("threads", [1, 3])
def test_a_mixed_batch_decodes_in_order_raw_frames_as_views(
    images: list[np.ndarray], threads: int
) -> None:
    rejected: list[Rejected] = []
    dec, metrics = decoder(threads, rejected)
    try:
        jpeg, bgr = common_pb2.ENCODING_JPEG, common_pb2.ENCODING_BGR
        frames = [queued(i + 1, img, jpeg if i % 2 else bgr) for i, img in enumerate(images)]
        out = dec.decode(frames)
        assert [d.header.sequence for d in out] == [1, 2, 3, 4, 5, 6]
        assert all(d.frame is f for d, f in zip(out, frames, strict=True))
        for i, d in enumerate(out):
            assert d.image.shape == images[i].shape
            if i % 2:
                assert close_to(d.image, images[i])
            else:
                # Raw BGR is the payload itself, not a copy.
                assert np.array_equal(d.image, images[i])
                assert np.shares_memory(d.image, np.frombuffer(frames[i].payload, np.uint8))
        assert rejected == []
        assert sample(metrics.registry, "strata_edge_drops_total", {"reason": "undecodable"}) == 0
    finally:
        dec.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_what_does_not_decode_is_dropped_counted_logged_and_handed_back(
    images: list[np.ndarray], threads: int, caplog: pytest.LogCaptureFixture
) -> None:
    rejected: list[Rejected] = []
    dec, metrics = decoder(threads, rejected)
    jpeg, bgr = common_pb2.ENCODING_JPEG, common_pb2.ENCODING_BGR
    frames = [
        queued(1, images[0], jpeg),
        queued(2, images[1], jpeg, payload=b"\xff\xd8 not a jpeg at all"),
        queued(3, images[2], bgr),
        # A raw frame shorter than its header says: the reshape fails, the worker lives.
        queued(4, images[3], bgr, payload=b"\x00" * 100),
        queued(5, images[4], jpeg),
    ]
    try:
        with caplog.at_level(logging.WARNING, "strata.edge.inference.decode"):
            out = dec.decode(frames)
        assert [d.header.sequence for d in out] == [1, 3, 5]
        assert [(seq, reason) for seq, reason, _ in rejected] == [
            (2, "undecodable"),
            (4, "undecodable"),
        ]
        assert "does not decode" in rejected[0][2]
        assert "cannot decode" in rejected[1][2]
        assert sample(metrics.registry, "strata_edge_drops_total", {"reason": "undecodable"}) == 2
        assert "dropped frame camera='cam' seq=2 at decode (undecodable)" in caplog.text
    finally:
        dec.close()


def test_h264_units_decode_in_stream_order_and_a_gap_is_rejected(
    images: list[np.ndarray],
) -> None:
    rejected: list[Rejected] = []
    dec, metrics = decoder(2, rejected)
    enc = H264Encoder(keyframe_interval=0)
    frames = []
    for i, img in enumerate(images):
        unit = enc.encode(img)
        f = queued(i + 1, img, common_pb2.ENCODING_H264, payload=unit.data)
        f.header.keyframe, f.header.stream_index = unit.keyframe, i + 1
        frames.append(f)
    try:
        out = dec.decode(frames[:3])
        assert [d.header.sequence for d in out] == [1, 2, 3]
        assert all(close_to(d.image, images[i]) for i, d in enumerate(out))
        # Unit 4 never arrives: unit 5 has lost its reference and is rejected for it, so
        # the node can ask the agent for a keyframe.
        out = dec.decode([frames[4]])
        assert out == []
        assert [(seq, reason) for seq, reason, _ in rejected] == [(5, "h264_no_reference")]
        drops = {"reason": "h264_no_reference"}
        assert sample(metrics.registry, "strata_edge_drops_total", drops) == 1
        assert dec.h264.needs_keyframe(7, "cam")
    finally:
        dec.close()
