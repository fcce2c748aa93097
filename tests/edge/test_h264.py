"""H.264 payloads end to end in-process: the device's encoder against the edge's decoders."""

from __future__ import annotations

import numpy as np
import pytest
from strata.device.transport.encoder import EncodedFrame, H264Encoder
from strata.edge.inference.h264 import H264Decoders, H264Error, LostReferenceError
from strata.shared.synthetic import SyntheticClip


@pytest.fixture(scope="module")
def images() -> list[np.ndarray]:
    clip = SyntheticClip(width=320, height=240, frames=12, fps=10, objects=3, seed=4)
    return [clip.frame(i).image for i in range(len(clip))]


class Link:
    """An encoder feeding a decoder set, numbering units as the agent does."""

    def __init__(self, interval: int = 0) -> None:
        self.enc = H264Encoder(keyframe_interval=interval)
        self.dec = H264Decoders()
        self.seq = 0
        self.index = 0

    def encode(self, image: np.ndarray) -> tuple[EncodedFrame, int, int]:
        unit = self.enc.encode(image)
        self.seq += 1
        self.index += 1
        return unit, self.seq, self.index

    def send(self, unit: EncodedFrame, seq: int, index: int, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        return self.dec.decode(1, "cam", seq, index, unit.data, unit.keyframe, w, h)


def close_to(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()) < 6.0


def test_stream_decodes_in_order_and_p_frames_are_small(images: list[np.ndarray]) -> None:
    link = Link()
    sizes = []
    for i, image in enumerate(images):
        unit, seq, idx = link.encode(image)
        assert unit.keyframe == (i == 0)
        sizes.append(len(unit.data))
        assert close_to(link.send(unit, seq, idx, image), image)
    assert max(sizes[1:]) < sizes[0]
    assert link.dec.lost == 0


def test_lost_unit_needs_a_keyframe_and_every_loss_counts(images: list[np.ndarray]) -> None:
    link = Link()
    for image in images[:3]:
        link.send(*link.encode(image), image)
    link.encode(images[3])  # given up on by the agent: never reaches the edge
    unit, seq, idx = link.encode(images[4])
    with pytest.raises(LostReferenceError):
        link.send(unit, seq, idx, images[4])
    assert link.dec.needs_keyframe(1, "cam")
    # The agent hears keyframe_request; until then P-frames stay lost.
    unit, seq, idx = link.encode(images[5])
    with pytest.raises(LostReferenceError):
        link.send(unit, seq, idx, images[5])
    link.enc.request_keyframe("keyframe_request")
    unit, seq, idx = link.encode(images[6])
    assert unit.keyframe
    assert close_to(link.send(unit, seq, idx, images[6]), images[6])
    assert link.dec.lost == 2


def test_edge_restart_mid_gop_then_keyframe(images: list[np.ndarray]) -> None:
    link = Link()
    for image in images[:3]:
        link.send(*link.encode(image), image)
    link.dec = H264Decoders()  # the node restarted: no decoder state
    unit, seq, idx = link.encode(images[3])
    with pytest.raises(LostReferenceError):
        link.send(unit, seq, idx, images[3])
    link.enc.request_keyframe("new edge session")
    unit, seq, idx = link.encode(images[4])
    assert close_to(link.send(unit, seq, idx, images[4]), images[4])


def test_resolution_change_restarts_with_a_keyframe(images: list[np.ndarray]) -> None:
    link = Link()
    link.send(*link.encode(images[0]), images[0])
    big = np.ascontiguousarray(np.repeat(np.repeat(images[1], 2, 0), 2, 1))
    unit, seq, idx = link.encode(big)
    assert unit.keyframe
    assert link.send(unit, seq, idx, big).shape == big.shape
    # A header that lies about the size is rejected without breaking the stream.
    unit, seq, idx = link.encode(big)
    with pytest.raises(H264Error) as err:
        link.dec.decode(1, "cam", seq, idx, unit.data, unit.keyframe, 320, 240)
    assert not isinstance(err.value, LostReferenceError)


def test_keyframe_interval_and_corrupt_unit(images: list[np.ndarray]) -> None:
    link = Link(interval=4)
    keys = [link.encode(image)[0].keyframe for image in images[:9]]
    assert keys == [True, False, False, False, True, False, False, False, True]
    link2 = Link()
    link2.send(*link2.encode(images[0]), images[0])
    _unit, seq, idx = link2.encode(images[1])
    with pytest.raises(LostReferenceError):
        link2.send(EncodedFrame(b"\x00\x00\x00\x01\x41" + b"\xff" * 40, False), seq, idx, images[1])
    assert link2.dec.lost >= 1


def test_idle_decoders_are_forgotten(images: list[np.ndarray]) -> None:
    link = Link()
    link.send(*link.encode(images[0]), images[0])
    assert len(link.dec) == 1
    assert link.dec.forget_idle(now=1e12) == 1
    assert len(link.dec) == 0
