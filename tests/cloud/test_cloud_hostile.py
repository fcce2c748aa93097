"""The decode bomb against a real cloud server: rejected from its JPEG header before any
pixel is decoded, on Classify and on Uplink, without the memory a decode would take."""

from __future__ import annotations

import time

import grpc
import pytest
from cloud_helpers import jpeg, stub_for
from hostile_testkit import BOMB_SIDE, PeakRss, decode_bomb
from strata.cloud.server import CloudServer
from strata.shared.contracts import analytics_pb2, common_pb2, current_version
from strata.shared.metrics import sample

pytestmark = pytest.mark.timeout(60)

MB = 1 << 20


def failures(server: CloudServer, method: str, reason: str) -> float:
    return sample(
        server.metrics.registry,
        "strata_cloud_request_failure_total",
        {"method": method, "reason": reason},
    )


def test_decode_bomb_is_rejected_before_decoding(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    good = jpeg((0, 0, 255))
    bomb = decode_bomb()

    def classify(image: bytes, width: int = 0, height: int = 0) -> analytics_pb2.ClassifyResponse:
        req = analytics_pb2.ClassifyRequest(
            version=current_version(),
            encoding=common_pb2.ENCODING_JPEG,
            image=image,
            width=width,
            height=height,
        )
        resp: analytics_pb2.ClassifyResponse = stub.Classify(req, timeout=10)
        return resp

    classify(good)  # warm: model, decoder, gRPC buffers
    peak = PeakRss()
    for width, height in ((0, 0), (32, 32), (BOMB_SIDE, BOMB_SIDE)):
        with pytest.raises(grpc.RpcError) as err:
            classify(bomb, width, height)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (
            "too_large" in err.value.details() and f"{BOMB_SIDE}x{BOMB_SIDE}" in err.value.details()
        )
    crops = [
        analytics_pb2.Crop(
            crop_id=f"c{i}",
            edge_id="e",
            camera_id="cam",
            encoding=common_pb2.ENCODING_JPEG,
            image=image,
        )
        for i, image in enumerate((bomb, good))
    ]
    batch = analytics_pb2.CropBatch(version=current_version(), crops=crops)
    acks = {a.crop_id: a for r in stub.Uplink(iter([batch]), timeout=30) for a in r.acks}
    assert acks["c0"].status == analytics_pb2.CROP_STATUS_INVALID
    assert acks["c0"].reason.startswith("too_large")
    assert acks["c1"].status == analytics_pb2.CROP_STATUS_STORED
    # A legitimate request right after is answered at once.
    t0 = time.monotonic()
    assert classify(good).labels
    took = time.monotonic() - t0
    growth = peak.growth()
    print(f"decode bomb: cloud peak RSS growth {growth / MB:.1f} MB, next Classify {took:.3f} s")
    assert growth < 20 * MB
    assert failures(colour_server, "Classify", "too_large") == 3
    assert failures(colour_server, "Uplink", "too_large") == 1
    channel.close()
