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
from strata.cloud.store.sqlite import SQLiteStore
from strata.shared.cli.table import parse as parse_table
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
        rows = parse_table(text.stdout)
        # The detector's label and score, the verdict beside them.
        assert [(r["LABEL"], r["SCORE"]) for r in rows] == [
            ("car", "0.700"),
            ("person", "0.700"),
            ("dog", "0.700"),
        ]
        # An abstention shows no ImageNet label beside a person (issue 38: no knowledge the
        # classifier lacks); the JSON keeps it as evidence.
        assert rows[1]["VERDICT"] == "abstained"
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
    rows = parse_table(capsys.readouterr().out)
    assert [r["LABEL"] for r in rows] == ["car"] * 4
    # Stored without a verdict: the classifier's label and score stand in the verdict column.
    assert [r["VERDICT"] for r in rows] == ["cloud car 0.500"] * 4
    assert [r["CROP"] for r in rows] == ["e/c1", "e/c3", "e/c5", "e/c7"]
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
        (row,) = parse_table(capsys.readouterr().out)
        assert list(row.values())[2:] == [
            "door",
            "line_crossed",
            "person",
            "1000-7#2",
            "line entry in",
            "count",
            "",
            "predicted",
            "",
        ], where
        assert main(["cloud", "query", *where, "--tracks", "--track", "1000-7", "--json"]) == 0
        dicts = [json.loads(ln) for ln in capsys.readouterr().out.strip().splitlines()]
        assert [d["event"]["idempotencyKey"] for d in dicts] == [e.idempotency_key for e in events]
        assert main(["cloud", "query", *where, "--zone", "shop", "--limit", "5"]) == 0
        assert "zone shop" in capsys.readouterr().out
        assert main(["cloud", "query", *where, "--type", "crossed"]) == 2
        assert "unknown track event type 'crossed'" in capsys.readouterr().err


def _store_of(path: Path, n: int) -> None:
    store = SQLiteStore(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    for f in [store.submit(stored_event(i, t=1_700_000_000_000_000_000 + i)) for i in range(n)]:
        f.result(30)
    store.close()


def test_query_prints_a_header_and_local_iso_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import datetime

    from strata.tools.cli import main

    path = tmp_path / "events.sqlite"
    _store_of(path, 2)
    assert main(["cloud", "query", "--db", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == [
        "ID", "TIME", "CAMERA", "LABEL", "SCORE", "VERDICT", "CROP", "TRACK", "MODEL",
    ]  # fmt: skip
    rows = parse_table(text)
    want = datetime.fromtimestamp(1_700_000_000).astimezone().isoformat(timespec="milliseconds")
    assert [r["TIME"] for r in rows] == [want, want]
    assert datetime.fromisoformat(want).utcoffset() is not None  # local, with its offset
    # --json is the message, unchanged: nanoseconds as the contract has them.
    assert main(["cloud", "query", "--db", str(path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["captureNs"] == str(1_700_000_000_000_000_000)
    # Nothing matches: a line on stderr, no table.
    assert main(["cloud", "query", "--db", str(path), "--camera", "absent"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and "no events match" in out.err


def test_a_closed_pipe_ends_the_query_quietly(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite"
    _store_of(path, 3000)  # far more than a pipe's buffer holds
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert reader.stdin is not None
    query = subprocess.run(
        [*STRATA, "cloud", "query", "--db", str(path), "--limit", "3000"],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    reader.stdin.close()
    assert reader.stdout is not None
    head = reader.stdout.read()
    assert reader.wait(30) == 0
    assert head.decode().split()[:2] == ["ID", "TIME"]
    assert "Traceback" not in query.stderr and "BrokenPipe" not in query.stderr, query.stderr
    assert query.stderr == ""
    assert query.returncode == 128 + signal.SIGPIPE
