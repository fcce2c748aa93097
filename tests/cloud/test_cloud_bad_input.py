"""Bad input and overload: each answered with its status code and counted in a metric."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import grpc
import numpy as np
import pytest
from cloud_helpers import jpeg, make_config, stub_for
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import PROTOCOL_MAJOR, analytics_pb2, common_pb2, current_version
from strata.shared.metrics import sample

GOOD = jpeg((0, 0, 255))


def classify_req(image: bytes, **kw: object) -> analytics_pb2.ClassifyRequest:
    return analytics_pb2.ClassifyRequest(
        version=kw.pop("version", current_version()),  # type: ignore[arg-type]
        encoding=common_pb2.ENCODING_JPEG,
        image=image,
    )


def crop(i: int, image: bytes) -> analytics_pb2.Crop:
    return analytics_pb2.Crop(
        crop_id=f"c{i}",
        edge_id="e",
        camera_id="cam",
        encoding=common_pb2.ENCODING_JPEG,
        image=image,
    )


def failures(server: CloudServer, method: str, reason: str) -> float:
    return sample(
        server.metrics.registry,
        "strata_cloud_request_failure_total",
        {"method": method, "reason": reason},
    )


def acks_of(stub, crops: list[analytics_pb2.Crop]) -> dict[str, analytics_pb2.CropAck]:
    batch = analytics_pb2.CropBatch(version=current_version(), crops=crops)
    return {a.crop_id: a for r in stub.Uplink(iter([batch]), timeout=30) for a in r.acks}


@pytest.fixture(scope="module")
def fifty_megapixel_jpeg() -> bytes:
    img = np.zeros((5773, 8661, 3), np.uint8)  # 50.0 MP
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 50])
    assert ok
    return bytes(buf)


def test_garbage_bytes_as_jpeg(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    garbage = np.random.default_rng(1).integers(0, 256, 5000, np.uint8).tobytes()
    # A JPEG header followed by junk: the header parses, the pixels do not.
    junk_body = GOOD[:200] + garbage
    for payload in (garbage, junk_body):
        with pytest.raises(grpc.RpcError) as err:
            stub.Classify(classify_req(payload), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "undecodable" in err.value.details()
    assert failures(colour_server, "Classify", "undecodable") == 2

    acks = acks_of(stub, [crop(1, GOOD), crop(2, garbage), crop(3, GOOD)])
    assert acks["c2"].status == analytics_pb2.CROP_STATUS_INVALID
    assert acks["c2"].reason.startswith("undecodable")
    assert acks["c1"].status == acks["c3"].status == analytics_pb2.CROP_STATUS_STORED
    assert failures(colour_server, "Uplink", "undecodable") == 1
    channel.close()


def test_fifty_megapixel_image(colour_server: CloudServer, fifty_megapixel_jpeg: bytes) -> None:
    channel, stub = stub_for(colour_server)
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(classify_req(fifty_megapixel_jpeg), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "8661x5773" in err.value.details() and "too_large" in err.value.details()
    assert failures(colour_server, "Classify", "too_large") == 1
    acks = acks_of(stub, [crop(1, fifty_megapixel_jpeg), crop(2, GOOD)])
    assert acks["c1"].status == analytics_pb2.CROP_STATUS_INVALID
    assert "limit" in acks["c1"].reason
    assert acks["c2"].status == analytics_pb2.CROP_STATUS_STORED
    assert failures(colour_server, "Uplink", "too_large") == 1
    # Nothing of that size was decoded or computed: only the good crop reached the model.
    assert sample(colour_server.metrics.registry, "strata_cloud_inference_count_total") == 1
    channel.close()


def test_bgr_size_mismatch_and_too_many_crops(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    server = start_server(
        make_config(model, tmp_path / "e.sqlite", labels, limits={"max_crops_per_batch": 2})
    )
    channel, stub = stub_for(server)
    bad = analytics_pb2.ClassifyRequest(
        version=current_version(),
        encoding=common_pb2.ENCODING_BGR,
        width=10,
        height=10,
        image=b"\0" * 299,
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(bad, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "299 bytes" in err.value.details()
    acks = acks_of(stub, [crop(i, GOOD) for i in range(3)])
    assert all(a.status == analytics_pb2.CROP_STATUS_INVALID for a in acks.values())
    assert all("limit is 2" in a.reason for a in acks.values())
    assert failures(server, "Uplink", "too_many_crops") == 3
    channel.close()


def test_wrong_protocol_version(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    v2 = common_pb2.ProtocolVersion(major=PROTOCOL_MAJOR + 1, minor=0)
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(classify_req(GOOD, version=v2), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"unsupported protocol version {PROTOCOL_MAJOR + 1}.0" in err.value.details()
    batch = analytics_pb2.CropBatch(version=v2, crops=[crop(1, GOOD)])
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Uplink(iter([batch]), timeout=10))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        list(stub.QueryEvents(analytics_pb2.QueryEventsRequest(version=v2), timeout=10))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # A newer minor version is fine.
    ok = stub.Classify(
        classify_req(GOOD, version=common_pb2.ProtocolVersion(major=PROTOCOL_MAJOR, minor=7)),
        timeout=10,
    )
    assert ok.labels[0].label == "red"
    assert failures(colour_server, "Classify", "protocol_version") == 1
    assert failures(colour_server, "Uplink", "protocol_version") == 1
    assert failures(colour_server, "QueryEvents", "protocol_version") == 1
    channel.close()


def test_bad_page_token(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    req = analytics_pb2.QueryEventsRequest(version=current_version(), page_token="nope")
    with pytest.raises(grpc.RpcError) as err:
        list(stub.QueryEvents(req, timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert failures(colour_server, "QueryEvents", "bad_page_token") == 1
    channel.close()


def slow_config(slow_model: tuple[Path, float], tmp_path: Path, queue: int) -> CloudConfig:
    return make_config(
        slow_model[0],
        tmp_path / "e.sqlite",
        batcher={"max_batch": 1, "max_queue_delay_ms": 0, "max_queue_size": queue},
        model={"path": str(slow_model[0]), "threads": 1},
    )


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


def test_expired_deadline_is_not_computed(
    slow_model: tuple[Path, float],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    server = start_server(slow_config(slow_model, tmp_path, queue=8))
    compute_s = slow_model[1]
    channel, stub = stub_for(server)
    first: list[analytics_pb2.ClassifyResponse] = []
    busy = threading.Thread(
        target=lambda: first.append(stub.Classify(classify_req(GOOD), timeout=60))
    )
    busy.start()
    # The second request arrives while the first computes; its deadline passes in the queue.
    reg = server.metrics.registry
    wait_for(lambda: sample(reg, "strata_cloud_queue_duration_seconds_count") == 1)
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(classify_req(GOOD), timeout=compute_s / 4)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    busy.join(60)
    assert first and first[0].labels[0].label == "class_0"  # no labels file: class ids
    wait_for(lambda: sample(reg, "strata_cloud_expired_skipped_total") == 1)
    # The handler counts when it wakes, which may be after the client already saw the status.
    counted = ("deadline", "cancelled")
    wait_for(lambda: sum(failures(server, "Classify", r) for r in counted) >= 1)
    assert {r: failures(server, "Classify", r) for r in counted} == {
        "deadline": 1,
        "cancelled": 0,
    }
    assert sample(reg, "strata_cloud_inference_count_total") == 1  # only the first one ran
    channel.close()


def test_full_queue_answers_resource_exhausted_with_retry_hint(
    slow_model: tuple[Path, float],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    server = start_server(slow_config(slow_model, tmp_path, queue=2))
    channel, stub = stub_for(server)
    outcomes: list[grpc.StatusCode] = []
    hints: list[str] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            stub.Classify(classify_req(GOOD), timeout=60)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
            meta = dict(exc.trailing_metadata() or ())
            with lock:
                hints.append(str(meta.get("retry-after-ms", "")))
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    refused = outcomes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert refused >= 1
    assert outcomes.count(grpc.StatusCode.OK) + refused == 8
    assert hints == ["200"] * refused
    assert failures(server, "Classify", "queue_full") == refused

    # In an uplink batch the overflow is acked RETRY with the hint; the rest is stored.
    acks = acks_of(stub, [crop(i, GOOD) for i in range(6)])
    retry = [a for a in acks.values() if a.status == analytics_pb2.CROP_STATUS_RETRY]
    stored = [a for a in acks.values() if a.status == analytics_pb2.CROP_STATUS_STORED]
    assert len(retry) >= 3 and len(retry) + len(stored) == 6
    assert all(a.retry_after_ms == 200 and "queue_full" in a.reason for a in retry)
    assert failures(server, "Uplink", "queue_full") == len(retry)
    channel.close()


def test_model_failure_is_an_error_not_a_hang(
    tmp_path: Path, start_server: Callable[[CloudConfig], CloudServer]
) -> None:
    from cloud_models import build_failing_classifier

    model = build_failing_classifier(tmp_path / "failing.onnx")
    server = start_server(make_config(model, tmp_path / "e.sqlite"))
    channel, stub = stub_for(server)
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(classify_req(GOOD), timeout=20)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "model failed" in err.value.details()
    acks = acks_of(stub, [crop(1, GOOD), crop(2, GOOD)])
    assert all(a.status == analytics_pb2.CROP_STATUS_RETRY for a in acks.values())
    assert all(a.reason.startswith("model_error") for a in acks.values())
    assert failures(server, "Classify", "model_error") == 1
    assert failures(server, "Uplink", "model_error") == 2
    channel.close()
