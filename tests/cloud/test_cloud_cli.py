"""`strata cloud` as a process: the starter Swin from the repository, query, clean stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from cloud_helpers import jpeg, stored_event, track_event
from grpc_health.v1 import health_pb2, health_pb2_grpc
from strata.cloud.metrics import CloudMetrics
from strata.cloud.sqlite_store import SQLiteStore
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import (
    analytics_pb2,
    analytics_pb2_grpc,
    common_pb2,
    current_version,
    events_pb2,
)
from strata.shared.models import ModelRepository

STRATA = [sys.executable, "-m", "strata.tools.cli"]


def wait_serving(address: str, proc: subprocess.Popen[str], timeout: float = 90.0) -> None:
    channel = grpc.insecure_channel(address)
    stub = health_pb2_grpc.HealthStub(channel)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.2)
        raise AssertionError(f"{address} did not become SERVING in {timeout}s")
    finally:
        channel.close()


@pytest.mark.slow
def test_cli_serves_the_starter_classifier_and_queries(tmp_path: Path, port: int) -> None:
    address = f"127.0.0.1:{port}"
    db = tmp_path / "events.sqlite"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text("cloud:\n  batcher:\n    max_batch: 4\n")  # the default model
    proc = subprocess.Popen(
        [*STRATA, "cloud", "--config", str(cfg), "--listen", address, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_serving(address, proc)
        channel = grpc.insecure_channel(address)
        stub = analytics_pb2_grpc.AnalyticsStub(channel)
        crops = [
            analytics_pb2.Crop(
                crop_id=f"k{i}",
                edge_id="edge-1",
                camera_id="cam-7",
                encoding=common_pb2.ENCODING_JPEG,
                image=jpeg((40 * i, 90, 200), w=96, h=64),
                timing=common_pb2.Timing(capture_ns=10**18 + i),
                detection=common_pb2.Detection(label=("car", "person", "dog")[i], score=0.7),
            )
            for i in range(3)
        ]
        batch = analytics_pb2.CropBatch(version=current_version(), crops=crops)
        acks = [a for r in stub.Uplink(iter([batch]), timeout=60) for a in r.acks]
        assert [a.status for a in acks] == [analytics_pb2.CROP_STATUS_STORED] * 3
        channel.close()
        out = subprocess.run(
            [*STRATA, "cloud", "query", "--target", address, "--camera", "cam-7", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        events = [json.loads(line) for line in out.stdout.splitlines()]
        assert [e["cropId"] for e in events] == ["k0", "k1", "k2"]
        # The classifier's top label is the evidence; the detector's label stays untouched.
        labels = set(ModelRepository().manifest("mobilenetv2_imagenet").labels)
        assert all(e["label"] in labels and e["model"] == "mobilenetv2_imagenet" for e in events)
        assert [e["edgeDetection"]["label"] for e in events] == ["car", "person", "dog"]
        assert events[1]["verdict"] == "VERDICT_ABSTAIN"  # ImageNet has no person class
        assert all(e["verdict"] in {"VERDICT_CONFIRM", "VERDICT_REJECT", "VERDICT_ABSTAIN"}
                   for e in events)  # fmt: skip
        text = subprocess.run(
            [*STRATA, "cloud", "query", "--target", address, "--camera", "cam-7"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert text.returncode == 0, text.stderr
        lines = [line.split("\t") for line in text.stdout.splitlines()]
        # The detector's label and score, the verdict beside them.
        assert [(ln[3], ln[4]) for ln in lines] == [
            ("car", "0.700"),
            ("person", "0.700"),
            ("dog", "0.700"),
        ]
        assert lines[1][5].startswith("abstained (")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0


def test_cli_refuses_plaintext_on_a_network_address(tmp_path: Path) -> None:
    out = subprocess.run(
        [*STRATA, "cloud", "--listen", "0.0.0.0:50999", "--db", str(tmp_path / "e.sqlite")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "refusing to serve plaintext gRPC on 0.0.0.0:50999" in out.stderr


def test_query_reads_a_store_file_without_an_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from strata.tools.cli import main

    path = tmp_path / "events.sqlite"
    store = SQLiteStore(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    for f in [store.submit(stored_event(i)) for i in range(12)]:
        f.result(10)
    store.close()
    assert main(["cloud", "query", "--db", str(path), "--label", "car", "--limit", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split("\t")[3] for ln in lines] == ["car"] * 4
    # Stored without a verdict: the classifier's label and score stand in the verdict column.
    assert [ln.split("\t")[5] for ln in lines] == ["cloud car 0.500"] * 4
    assert [ln.split("\t")[6] for ln in lines] == ["e/c1", "e/c3", "e/c5", "e/c7"]
    assert main(["cloud", "query", "--db", str(tmp_path / "absent.sqlite")]) == 2
    assert "no such event store" in capsys.readouterr().err
    assert not (tmp_path / "absent.sqlite").exists()


def test_query_prints_track_events_from_a_file_and_an_endpoint(
    tmp_path: Path, colour_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from strata.tools.cli import main

    events = [
        track_event(1, kind="new", track_sequence=0),
        track_event(
            2,
            kind="line_crossed",
            line="entry",
            rule="count",
            direction=events_pb2.CROSSING_DIRECTION_IN,
            observed=False,
        ),
        track_event(3, kind="zone_entered", zone="shop"),
        track_event(4, kind="end"),
    ]
    path = tmp_path / "events.sqlite"
    store = SQLiteStore(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    for f in [store.submit_track(ev) for ev in events]:
        f.result(10)
    store.close()
    channel = grpc.insecure_channel(colour_server.address)
    stub = analytics_pb2_grpc.AnalyticsStub(channel)
    list(stub.Uplink(iter([analytics_pb2.CropBatch(version=current_version(), events=events)])))
    channel.close()
    for where in (["--db", str(path)], ["--target", colour_server.address]):
        assert main(["cloud", "query", *where, "--type", "line_crossed"]) == 0
        (line,) = capsys.readouterr().out.strip().splitlines()
        cols = line.split("\t")
        assert cols[2:] == [
            "door",
            "line_crossed",
            "person",
            "1000-7#2",
            "line entry in",
            "rule count",
            "predicted",
        ], where
        assert main(["cloud", "query", *where, "--tracks", "--track", "1000-7", "--json"]) == 0
        dicts = [json.loads(ln) for ln in capsys.readouterr().out.strip().splitlines()]
        assert [d["event"]["idempotencyKey"] for d in dicts] == [e.idempotency_key for e in events]
        assert main(["cloud", "query", *where, "--zone", "shop", "--limit", "5"]) == 0
        assert "zone shop" in capsys.readouterr().out
        assert main(["cloud", "query", *where, "--type", "crossed"]) == 2
        assert "unknown track event type 'crossed'" in capsys.readouterr().err
