"""Event clips through a real server on 127.0.0.1 (cloud/api/clip_service.py) with a real fMP4
cut from vtest.mp4: uploaded in chunks and acked by committed bytes (a resend changes
nothing, a gap sends the device back, over the cap and bad input refused with counted
reasons, the final chunk completes it), resumed after a restart of the cloud, served by
GetClip by each key and by `strata cloud clip` as a file PyAV decodes; on PostgreSQL every
replica serves a clip another stored."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from clip_helpers import chunk, chunks, frames, info, make_clip
from cloud_helpers import make_config, stub_for, track_event
from strata.cloud.client.clip_cli import clip_query
from strata.cloud.server import CloudServer
from strata.cloud.store.clip_rows import ClipQuery
from strata.shared.config.cloud import CloudClipsConfig
from strata.shared.contracts import clips_pb2, current_version
from strata.shared.metrics import sample

C = clips_pb2
STRATA = [sys.executable, "-m", "strata.tools.cli"]
KB = 1024
STORED, RETRY, INVALID = (
    C.CLIP_CHUNK_STATUS_STORED,
    C.CLIP_CHUNK_STATUS_RETRY,
    C.CLIP_CHUNK_STATUS_INVALID,
)


@pytest.fixture(scope="module")
def clip() -> bytes:
    return make_clip(2.0)


def make_clips(**kw: Any) -> CloudClipsConfig:
    return CloudClipsConfig(**{"max_bytes": 2_000_000, **kw})


def config(colour_model: tuple[Path, Path], db: Path | str, **extra: Any) -> Any:
    model, labels = colour_model
    cfg = make_config(model, Path("unused.sqlite"), labels, clips=make_clips().model_dump())
    store = {"url": db, "connect_timeout_s": 5.0} if isinstance(db, str) else {"path": str(db)}
    return cfg.model_copy(update={"store": cfg.store.model_copy(update=store), **extra})


@pytest.fixture
def server(
    colour_model: tuple[Path, Path], tmp_path: Path, start_server: Callable[..., CloudServer]
) -> CloudServer:
    return start_server(config(colour_model, tmp_path / "events.sqlite"))


def send(stub: Any, sent: list[C.ClipChunk]) -> list[C.ClipChunkAck]:
    acks = list(stub.UploadClip(iter(sent), timeout=30))
    assert [a.clip_id for a in acks] == [c.info.clip_id for c in sent]
    return acks


def fetch(stub: Any, **kw: Any) -> tuple[bytes, list[C.ClipChunk]]:
    req = C.GetClipRequest(version=current_version(), **kw)
    got = list(stub.GetClip(req, timeout=30))
    return b"".join(c.data for c in got), got


def upload(stub: Any, data: bytes, size: int, ci: C.ClipInfo, max_calls: int = 200) -> int:
    """A device's uploader: one chunk per call from where the cloud says it is, until the
    clip is complete; the bytes it sent."""
    offset = sent = 0
    for _ in range(max_calls):
        last = offset + size >= len(data)
        (ack,) = send(stub, [chunk(data, offset, size, ci, last=last)])
        assert ack.status in (STORED, RETRY), ack.reason
        sent += min(size, len(data) - offset)
        if ack.complete:
            return sent
        offset = ack.committed_bytes
    raise AssertionError("the upload did not complete")


def test_chunks_are_committed_in_order_and_refused_with_reasons(
    server: CloudServer, clip: bytes
) -> None:
    ci = info()
    parts = chunks(clip, 64 * KB, ci)
    channel, stub = stub_for(server)
    m = server.metrics.registry
    with channel:
        acks = send(stub, [parts[0], parts[1], parts[2], parts[1], parts[5]])
        assert [(a.status, a.committed_bytes) for a in acks] == [
            (STORED, 64 * KB),
            (STORED, 128 * KB),
            (STORED, 192 * KB),
            (STORED, 192 * KB),  # a resend: nothing changes
            (RETRY, 192 * KB),  # a gap: go back to 192 KB, at once
        ]
        assert acks[4].reason.startswith("gap") and acks[4].retry_after_ms == 0
        assert not any(a.complete for a in acks)
        # A chunk that overlaps the committed end adds only what is new.
        (ack,) = send(stub, [chunk(clip, 150 * KB, 64 * KB, ci)])
        assert (ack.status, ack.committed_bytes) == (STORED, 214 * KB)
        # Partial: GetClip serves what is committed, without `last`.
        data, got = fetch(stub, clip_id=ci.clip_id)
        assert data == clip[: 214 * KB] and not any(c.last for c in got)
        rest = [chunk(clip, 214 * KB, len(clip), ci, last=True)]
        (ack,) = send(stub, rest)
        assert (ack.status, ack.committed_bytes, ack.complete) == (STORED, len(clip), True)
        # After the end: a resend is acked complete, more bytes are refused.
        again, more = rest[0], chunk(clip + b"x" * 10, len(clip), 10, ci)
        acks = send(stub, [again, more])
        assert (acks[0].status, acks[0].complete) == (STORED, True)
        assert acks[1].status == INVALID and acks[1].reason.startswith("final")
    assert sample(m, "strata_cloud_camera_clip_bytes_total", {"camera": "door"}) == len(clip)
    assert sample(m, "strata_cloud_clips_stored_total", {"outcome": "complete"}) == 1
    assert sample(m, "strata_cloud_clips_started_total", {"camera": "door"}) == 1
    assert sample(m, "strata_cloud_clip_chunks_resent_total") == 2
    refused = "strata_cloud_clip_chunks_refused_total"
    assert sample(m, refused, {"status": "retry", "reason": "gap"}) == 1
    assert sample(m, refused, {"status": "invalid", "reason": "final"}) == 1
    assert server.store.count_clips() == 1


def moof_offsets(data: bytes) -> list[int]:
    """Where the fMP4's fragments start (its top-level moof boxes)."""
    at, out = 0, []
    while at + 8 <= len(data):
        size, kind = int.from_bytes(data[at : at + 4], "big"), data[at + 4 : at + 8]
        if kind == b"moof":
            out.append(at)
        at += size
    return out


def test_a_clip_cut_back_by_the_device_is_served_as_its_prefix(
    server: CloudServer, clip: bytes
) -> None:
    # Issue 39: the device sent an open clip's fragments as they were written, then heard
    # its track ended long before and cut the file back to a fragment boundary.
    ci = info()
    cut = moof_offsets(clip)[1]  # the first second of the clip's two
    open_parts = [chunk(clip, o, 64 * KB, ci) for o in range(0, len(clip), 64 * KB)]
    channel, stub = stub_for(server)
    m = server.metrics.registry
    with channel:
        acks = send(stub, open_parts)
        assert acks[-1].committed_bytes == len(clip) and not acks[-1].complete
        early = chunk(clip, cut, 0, ci)
        early.cut_back = True  # only the last chunk may say so
        back = chunk(clip, cut, 0, ci, last=True)
        back.cut_back = True
        acks = send(stub, [early, back])
        assert acks[0].status == INVALID and acks[0].reason.startswith("cut_back"), acks[0]
        assert (acks[1].status, acks[1].committed_bytes, acks[1].complete) == (STORED, cut, True)
        data, got = fetch(stub, clip_id=ci.clip_id)
        assert data == clip[:cut] and got[-1].last
        assert 0 < frames(data) < frames(clip)
    dropped = sample(m, "strata_cloud_clip_bytes_cut_back_total", {"camera": "door"})
    assert dropped == len(clip) - cut


def test_bad_chunks_are_invalid_and_store_nothing(server: CloudServer) -> None:
    ci = info(clip_id="door/s1/2")
    big = chunk(b"\x00" * 100 * KB, 0, 100 * KB, ci)
    big.offset = 1_950_000  # past cloud.clips.max_bytes (2 MB)
    other_camera = chunk(b"abc", 0, 3, info(clip_id="yard/s1/1"))
    bad_uid = chunk(b"abc", 0, 3, info(clip_id="door/s1/3", tracks=("nope",)))
    liar = chunk(b"abc", 0, 3, ci, last=True)
    liar.info.size_bytes = 4
    no_outcome = chunk(b"abc", 0, 3, ci, last=True)
    no_outcome.info.outcome = C.CLIP_OUTCOME_UNSPECIFIED
    old = chunk(b"abc", 0, 3, ci)
    old.version.major = 1
    channel, stub = stub_for(server)
    with channel:
        acks = send(stub, [big, other_camera, bad_uid, liar, no_outcome, old])
    assert [a.status for a in acks] == [INVALID] * 6
    assert [a.reason.split(":")[0] for a in acks] == [
        "too_large",
        "bad_clip_id",
        "bad_track_uid",
        "size_mismatch",
        "bad_outcome",
        "protocol_version",
    ]
    assert "cloud.clips.max_bytes" in acks[0].reason
    assert server.store.count_clips() == 0
    m = server.metrics.registry
    refused = {"status": "invalid", "reason": "too_large"}
    assert sample(m, "strata_cloud_clip_chunks_refused_total", refused) == 1
    failed = {"method": "UploadClip", "reason": "clip_too_large"}
    assert sample(m, "strata_cloud_request_failure_total", failed) == 1


def test_a_clip_with_no_bytes_is_stored_with_its_reason(server: CloudServer) -> None:
    ci = info(clip_id="door/s1/9", tracks=("2000-3",))
    c = chunk(b"", 0, 0, ci, last=True)
    c.info.outcome, c.info.reason = C.CLIP_OUTCOME_NO_KEYFRAME, "no keyframe in 12 s"
    channel, stub = stub_for(server)
    with channel:
        (ack,) = send(stub, [c])
        assert (ack.status, ack.committed_bytes, ack.complete) == (STORED, 0, True)
        data, got = fetch(stub, camera_id="door", track_uid="2000-3")
    assert data == b"" and len(got) == 1 and got[0].last
    assert got[0].info.outcome == C.CLIP_OUTCOME_NO_KEYFRAME
    assert got[0].info.reason == "no keyframe in 12 s"


def test_get_clip_by_every_key(server: CloudServer, clip: bytes) -> None:
    ci = info(tracks=("1000-7", "1500-8"))
    ev = track_event(1, track=(1000, 7), kind="new")
    server.store.submit_track(ev).result(10)
    channel, stub = stub_for(server)
    with channel:
        send(stub, chunks(clip, 256 * KB, ci))
        for kw in (
            {"clip_id": ci.clip_id},
            {"event_key": ev.idempotency_key},
            {"event_key": "door/1500-8/0/new"},  # its events not stored (yet): the key says
            {"camera_id": "door", "track_uid": "1500-8"},
            {"track_uid": "1000-7"},
        ):
            data, got = fetch(stub, **kw)
            assert data == clip, kw
            assert got[-1].last and not any(c.last for c in got[:-1])
            assert all(len(c.data) <= 1024 * KB for c in got)
            assert got[0].info.final and got[0].info.size_bytes == len(clip)
        for kw, code in (
            ({"clip_id": "door/s1/404"}, grpc.StatusCode.NOT_FOUND),
            ({"camera_id": "door", "track_uid": "9-9"}, grpc.StatusCode.NOT_FOUND),
            ({}, grpc.StatusCode.INVALID_ARGUMENT),
            ({"track_uid": "not-a-uid"}, grpc.StatusCode.INVALID_ARGUMENT),
        ):
            with pytest.raises(grpc.RpcError) as err:
                fetch(stub, **kw)
            assert err.value.code() == code, kw
    assert frames(data) == frames(clip) > 10


def test_an_upload_resumes_from_committed_after_a_cloud_restart(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[..., CloudServer],
    clip: bytes,
) -> None:
    cfg = config(colour_model, tmp_path / "events.sqlite")
    first = start_server(cfg)
    ci = info()
    parts = chunks(clip, 64 * KB, ci)
    channel, stub = stub_for(first)
    with channel:
        acks = send(stub, parts[:4])
    assert acks[-1].committed_bytes == 256 * KB
    first.stop(0.5)  # mid-upload
    second = start_server(cfg)
    channel, stub = stub_for(second)
    with channel:
        # The device restarts too and begins at 0: the first ack sends it to 256 KB.
        sent = upload(stub, clip, 64 * KB, ci)
        assert sent == 64 * KB + len(clip) - 256 * KB  # one chunk again, then the rest
        data, _ = fetch(stub, clip_id=ci.clip_id)
    assert data == clip


def test_every_replica_serves_every_clip(
    colour_model: tuple[Path, Path],
    pg_url: str,
    start_server: Callable[..., CloudServer],
    clip: bytes,
) -> None:
    a = start_server(config(colour_model, pg_url))
    b = start_server(config(colour_model, pg_url))
    ci = info()
    parts = chunks(clip, 128 * KB, ci)
    half = len(parts) // 2
    ch_a, stub_a = stub_for(a)
    ch_b, stub_b = stub_for(b)
    with ch_a, ch_b:
        send(stub_a, parts[:half])
        # The device's connection moves to the other replica: it goes on from committed.
        acks = send(stub_b, [parts[half + 1], parts[half], *parts[half + 1 :]])
        assert acks[0].status == RETRY and acks[0].committed_bytes == half * 128 * KB
        assert acks[-1].complete
        for stub in (stub_a, stub_b):
            data, _ = fetch(stub, camera_id="door", track_uid="1000-7")
            assert data == clip
    assert a.store.count_clips() == 1


def test_cli_writes_a_clip_pyav_decodes(server: CloudServer, clip: bytes, tmp_path: Path) -> None:
    ci = info(tracks=("1000-7",))
    ev = track_event(2, track=(1000, 7), kind="end")
    server.store.submit_track(ev).result(10)
    channel, stub = stub_for(server)
    with channel:
        send(stub, chunks(clip, 300 * KB, ci))
    out = tmp_path / "remote.mp4"
    run = subprocess.run(
        [*STRATA, "cloud", "clip", ev.idempotency_key, "-o", str(out), "--target",
         server.address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == clip and frames(out) == frames(clip)
    assert run.stdout.split("\t")[1:4] == [ci.clip_id, "complete", f"{len(clip)} bytes"]
    server.stop(0.5)
    local = tmp_path / "local.mp4"
    run = subprocess.run(
        [*STRATA, "cloud", "clip", "door/1000-7", "-o", str(local), "--db",
         server.cfg.store.path],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert local.read_bytes() == clip
    run = subprocess.run(
        [*STRATA, "cloud", "clip", "door/5-5", "-o", str(tmp_path / "none.mp4"), "--db",
         server.cfg.store.path],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1 and "no clip stored for door/5-5" in run.stderr
    assert not (tmp_path / "none.mp4").exists()


def test_cli_reads_every_form_of_reference() -> None:
    assert clip_query("door/1000-7/3/line_crossed") == ClipQuery(
        event_key="door/1000-7/3/line_crossed"
    )
    assert clip_query("door/1000-7") == ClipQuery(camera_id="door", track_uid="1000-7")
    assert clip_query("1000-7", camera="yard") == ClipQuery(camera_id="yard", track_uid="1000-7")
    assert clip_query("door/s1/4") == ClipQuery(clip_id="door/s1/4")
    with pytest.raises(ValueError):
        clip_query("nonsense")


def test_a_busy_store_answers_retry_with_a_hint(
    colour_model: tuple[Path, Path], tmp_path: Path, start_server: Callable[..., CloudServer]
) -> None:
    import sqlite3
    import threading
    import time

    db = tmp_path / "events.sqlite"
    server = start_server(config(colour_model, db, clips=make_clips(max_writers=1)))
    channel, stub = stub_for(server)
    m = server.metrics.registry
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # another writer holds the database: the chunk waits
    first: list[C.ClipChunkAck] = []
    writer = threading.Thread(
        target=lambda: first.extend(send(stub, [chunk(b"a" * 9, 0, 9, info())]))
    )
    with channel:
        writer.start()
        deadline = time.monotonic() + 10
        while sample(m, "strata_cloud_clip_chunks_received_total") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)
        other = chunk(b"b" * 5, 0, 5, info(clip_id="door/s2/1"))
        (busy,) = send(stub, [other])
        assert busy.status == RETRY and busy.reason.startswith("busy")
        assert busy.retry_after_ms == server.cfg.batcher.retry_after_ms > 0
        assert busy.committed_bytes == 0
        lock.execute("ROLLBACK")
        writer.join(20)
        assert first[0].status == STORED and first[0].committed_bytes == 9
        (ok,) = send(stub, [other])
        assert ok.status == STORED
    lock.close()
    refused = {"status": "retry", "reason": "busy"}
    assert sample(m, "strata_cloud_clip_chunks_refused_total", refused) == 1


def test_garbage_is_invalid_argument(server: CloudServer) -> None:
    channel = grpc.insecure_channel(server.address)
    with channel:
        get = channel.unary_stream("/strata.v1.Analytics/GetClip")
        with pytest.raises(grpc.RpcError) as err:
            list(get(b"\xff\xff\xff", timeout=10))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        up = channel.stream_stream("/strata.v1.Analytics/UploadClip")
        with pytest.raises(grpc.RpcError) as err:
            list(up(iter([b"\xff\xff\xff"]), timeout=10))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_clip_bytes_per_camera_in_strata_cost(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[..., CloudServer],
    clip: bytes,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from strata.shared.config.common import CostConfig, MetricsConfig
    from strata.shared.cost import per_day, usage_by_camera
    from strata.shared.loopback import free_port
    from strata.tools.cli import main
    from strata.tools.cost import scrape

    metrics = MetricsConfig(port=free_port())
    server = start_server(config(colour_model, tmp_path / "events.sqlite", metrics=metrics))
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    before = usage_by_camera(scrape([url])).get("door")
    channel, stub = stub_for(server)
    with channel:
        send(stub, chunks(clip, 128 * KB, info()))
    after = usage_by_camera(scrape([url]))["door"]
    assert after.clip_bytes == len(clip) and (before is None or before.clip_bytes == 0)
    cost = per_day(after, 86_400.0, CostConfig(egress_per_gb=1.0, storage_per_gb_month=1.0))
    assert cost.egress == pytest.approx(len(clip) / 1e9) and cost.storage > 0
    assert main(["cost", "--cloud", url, "--interval", "0.2"]) == 0
    table = capsys.readouterr().out
    assert "clips GB" in table and "door" in table
