"""Snapshots through a real server on 127.0.0.1 (cloud/api/snapshot_service.py): acked one by one
on the Uplink stream (an oversize one and one that is not a JPEG that decodes refused with
counted reasons, never stored), served by GetSnapshot and by `strata cloud snapshot` (against
the endpoint and a store file) as files that decode."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from cloud_helpers import decodes, make_config, picture, snapshot, stub_for, track_event
from strata.cloud.cli import snapshot_query
from strata.cloud.server import CloudServer
from strata.shared.contracts import analytics_pb2, current_version, events_pb2
from strata.shared.metrics import sample

S = events_pb2
STRATA = [sys.executable, "-m", "strata.tools.cli"]
A = (1_000_000, 7)


@pytest.fixture
def server(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[..., CloudServer],
) -> CloudServer:
    model, labels = colour_model
    cfg = make_config(model, tmp_path / "events.sqlite", labels, snapshots={"max_bytes": 20_000})
    return start_server(cfg)


def uplink(stub: Any, batches: list[analytics_pb2.CropBatch]) -> list[Any]:
    out = list(stub.Uplink(iter(batches), timeout=30))
    assert all(r.version.minor >= 2 for r in out), "the edge needs minor >= 2 to trust them"
    return out


def batch(snaps: list[Any], events: list[Any] | None = None) -> analytics_pb2.CropBatch:
    return analytics_pb2.CropBatch(version=current_version(), snapshots=snaps, events=events or [])


def get(stub: Any, **kw: Any) -> Any:
    return stub.GetSnapshot(
        analytics_pb2.GetSnapshotRequest(version=current_version(), **kw), timeout=10
    )


def test_snapshots_are_acked_and_bad_ones_refused_with_reasons(server: CloudServer) -> None:
    good = snapshot(track=A)
    frame = snapshot(track=A, kind="full_frame")
    big = snapshot(track=A, revision=1, size=(600, 400), jpeg=picture(600, 400, 1))
    big.jpeg += b"\x00" * (20_001 - len(big.jpeg))  # over cloud.snapshots.max_bytes
    not_jpeg = snapshot(track=A, revision=2, jpeg=b"GIF89a not a jpeg at all")
    cut = snapshot(track=A, revision=3)
    cut.jpeg = cut.jpeg[: len(cut.jpeg) // 2]
    liar = snapshot(track=A, revision=4)
    liar.width = 65  # the JPEG says 64
    bad_id = snapshot(track=A, revision=5)
    bad_id.snapshot_id = "door/1000000-7/best_crop/6"
    ev = track_event(1, track=A, kind="new", track_sequence=0)
    ev.crop_snapshot_id, ev.frame_snapshot_id = good.snapshot_id, frame.snapshot_id
    channel, stub = stub_for(server)
    with channel:
        snaps = [good, frame, big, not_jpeg, cut, liar, bad_id]
        (resp,) = uplink(stub, [batch(snaps, [ev])])
        acks = list(resp.snapshot_acks)
        assert [a.snapshot_id for a in acks] == [s.snapshot_id for s in snaps]
        assert [a.status for a in acks] == [S.SNAPSHOT_STATUS_STORED] * 2 + [
            S.SNAPSHOT_STATUS_INVALID
        ] * 5
        reasons = [a.reason.split(":")[0] for a in acks[2:]]
        assert reasons == [
            "too_large",
            "not_jpeg",
            "undecodable",
            "jpeg_dimensions",
            "bad_snapshot_id",
        ]
        assert "cloud.snapshots.max_bytes is 20000" in acks[2].reason
        assert resp.event_acks[0].status == S.TRACK_EVENT_STATUS_STORED
        # A resend is a duplicate; so is a lower revision after a higher one.
        (again,) = uplink(stub, [batch([good])])
        assert again.snapshot_acks[0].status == S.SNAPSHOT_STATUS_DUPLICATE
        better = snapshot(track=A, revision=7)
        (resp2,) = uplink(stub, [batch([better, snapshot(track=A, revision=6)])])
        assert [a.status for a in resp2.snapshot_acks] == [
            S.SNAPSHOT_STATUS_STORED,
            S.SNAPSHOT_STATUS_DUPLICATE,
        ]
        assert resp2.snapshot_acks[1].reason == f"kept {better.snapshot_id}"

        # Served by the event's key: the track's current best crop (revision 7), and its frame.
        reply = get(stub, event_key=ev.idempotency_key)
        assert reply.snapshot.snapshot_id == better.snapshot_id and reply.stored_ns > 0
        assert decodes(reply.snapshot.jpeg) == (64, 48)
        reply = get(stub, snapshot_id=ev.frame_snapshot_id)
        assert reply.snapshot.kind == S.SNAPSHOT_KIND_FULL_FRAME
        assert decodes(reply.snapshot.jpeg) == (160, 120)
        with pytest.raises(grpc.RpcError) as err:
            get(stub, event_key="door/1000000-7/9/end")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as err:
            get(stub, track_uid="7")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert server.store.count_snapshots() == 2
    m = server.metrics.registry
    for reason in ("too_large", "not_jpeg", "undecodable", "jpeg_dimensions", "bad_snapshot_id"):
        labels = {"kind": "best_crop", "reason": reason}
        assert sample(m, "strata_cloud_snapshots_invalid_total", labels) == 1, reason
        failure = {"method": "Uplink", "reason": f"snapshot_{reason}"}
        assert sample(m, "strata_cloud_request_failure_total", failure) == 1
    assert sample(m, "strata_cloud_snapshots_stored_total", {"kind": "best_crop"}) == 2
    assert sample(m, "strata_cloud_snapshots_duplicate_total", {"kind": "best_crop"}) == 2
    assert sample(m, "strata_cloud_snapshots_received_total", {"kind": "best_crop"}) == 9


def test_cli_writes_a_jpeg_that_decodes(server: CloudServer, tmp_path: Path) -> None:
    snap = snapshot(track=A, kind="full_frame", revision=3)
    ev = track_event(1, track=A, kind="new", track_sequence=0)
    ev.frame_snapshot_id = snap.snapshot_id
    channel, stub = stub_for(server)
    with channel:
        (resp,) = uplink(stub, [batch([snap], [ev])])
    assert resp.snapshot_acks[0].status == S.SNAPSHOT_STATUS_STORED
    out = tmp_path / "remote.jpg"
    run = subprocess.run(
        [*STRATA, "cloud", "snapshot", ev.idempotency_key, "--kind", "full_frame", "-o", str(out),
         "--target", server.address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert decodes(out.read_bytes()) == (160, 120)
    assert run.stdout.split("\t")[1] == snap.snapshot_id
    # The store file, without an endpoint; by camera/track uid.
    server.stop(0.5)
    local = tmp_path / "local.jpg"
    run = subprocess.run(
        [*STRATA, "cloud", "snapshot", "door/1000000-7", "--kind", "full_frame", "-o",
         str(local), "--db", server.cfg.store.path],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert local.read_bytes() == out.read_bytes()
    # No best crop stored: a clear line, exit 1.
    run = subprocess.run(
        [*STRATA, "cloud", "snapshot", "1000000-7", "-o", str(tmp_path / "none.jpg"),
         "--db", server.cfg.store.path],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1 and "no snapshot stored for 1000000-7" in run.stderr
    assert not (tmp_path / "none.jpg").exists()


def test_cli_reads_every_form_of_reference() -> None:
    assert snapshot_query("door/1-7/full_frame/2").snapshot_id == "door/1-7/full_frame/2"
    q = snapshot_query("site/door/1-7/3/line_crossed")
    assert q.event_key == "site/door/1-7/3/line_crossed"
    q = snapshot_query("site/door/1-7", kind="full_frame")
    assert (q.camera_id, q.track_uid, q.kind) == ("site/door", "1-7", S.SNAPSHOT_KIND_FULL_FRAME)
    q = snapshot_query("1-7", camera="yard")
    assert (q.camera_id, q.track_uid) == ("yard", "1-7")
    with pytest.raises(ValueError, match="unknown snapshot kind"):
        snapshot_query("1-7", kind="thumb")
