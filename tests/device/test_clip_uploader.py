"""device/clips/uploader.py against a real gRPC server on loopback (tests/device/clip_cloud.py)
that stores each clip honestly: clips go oldest first, whole and byte for byte, resume
after a server restart and after a gap from the committed size, wait when asked, are not
resent once refused, an open clip's bytes go as they grow; the folder stays under its
bound (the oldest deleted, counted); plaintext off loopback is refused."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from strata.device.clips.spool import ClipSpool
from strata.device.clips.uploader import ClipUploader, UploadError, UploadSetupError, target_host
from strata.device.metrics import DeviceMetrics
from strata.shared.config.device import ClipsConfig, ClipUploadConfig
from strata.shared.config.edge import UplinkTlsConfig
from strata.shared.contracts import clips_pb2
from strata.shared.metrics import sample

from .clip_cloud import Cloud, Faults

KIB = 1024


class Device:
    """A clips folder, its spool and an uploader to `target`."""

    def __init__(self, root: Path, target: str, **upload: object) -> None:
        self.registry = CollectorRegistry()
        self.metrics = DeviceMetrics(self.registry)
        cfg = ClipsConfig(
            enabled=True,
            dir=str(root),
            upload=ClipUploadConfig(
                target=target, chunk_kib=4, ack_timeout_s=5, backoff_initial_s=0.05, **upload
            ),  # type: ignore[arg-type]
        )
        self.spool = ClipSpool(cfg, "agent", self.metrics)
        self.uploader = ClipUploader(cfg.upload, self.spool, self.metrics)
        self.n = 0

    def clip(self, size: int, camera: str = "cam", final: bool = True) -> tuple[Path, str]:
        """A clip file of `size` random bytes, journaled as the cutter does."""
        self.n += 1
        clip_id = f"{camera}/s/{self.n}"
        path = self.spool.dir / camera / f"s-{self.n}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        info = clips_pb2.ClipInfo(
            clip_id=clip_id, camera_id=camera, track_uids=["t"], start_ns=self.n * 10**9
        )
        self.spool.opened(path, info)
        if final:
            self.finish(path, info)
        return path, clip_id

    def finish(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        final = clips_pb2.ClipInfo()
        final.CopyFrom(info)
        final.final, final.size_bytes = True, path.stat().st_size
        final.outcome = clips_pb2.CLIP_OUTCOME_COMPLETE
        self.spool.done(path, final)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        return sample(self.registry, name, labels or {}) or 0.0


def test_clips_go_whole_oldest_first_and_leave_the_device(tmp_path: Path, port: int) -> None:
    cloud = Cloud(tmp_path / "cloud", port)
    dev = Device(tmp_path / "clips", f"127.0.0.1:{port}")
    try:
        clips = [dev.clip(size) for size in (10 * KIB + 7, 3 * KIB, 0)]
        originals = {cid: path.read_bytes() if path.exists() else b"" for path, cid in clips}
        dev.uploader.run_pass()
        assert cloud.store.complete == set(originals)
        for cid, data in originals.items():
            assert cloud.bytes_of(cid) == data if data else not cloud.store.path(cid).exists()
            assert cloud.store.infos[cid].final
        assert not any(path.exists() or path.with_suffix(".clip").exists() for path, _ in clips)
        total = sum(map(len, originals.values()))
        assert dev.value("strata_device_clip_upload_bytes_total") == total
        assert dev.value("strata_device_clips_uploaded_total") == 3
    finally:
        cloud.stop()


def test_an_upload_resumes_after_a_server_restart_and_after_a_gap(
    tmp_path: Path, port: int
) -> None:
    faults = Faults(stop_after=4, lose_at=9)
    cloud = Cloud(tmp_path / "cloud", port, faults)
    dev = Device(tmp_path / "clips", f"127.0.0.1:{port}")
    try:
        path, cid = dev.clip(40 * KIB + 123)
        data = path.read_bytes()
        with pytest.raises(UploadError, match="unavailable"):
            dev.uploader.run_pass()  # the server went after 3 chunks (the probe and 2)
        held = len(cloud.bytes_of(cid))
        assert 0 < held < len(data)
        cloud.restart()
        dev.uploader.run_pass()  # resumes from what the server holds; a gap on the way
        assert cloud.bytes_of(cid) == data and cid in cloud.store.complete
        assert not path.exists()
        # Bytes counted as the cloud acked them stored: the lost ones twice, none else.
        assert faults.lost > 0
        assert dev.value("strata_device_clip_upload_bytes_total") == len(data) + faults.lost
        assert faults.chunks > 2 + len(data) // (4 * KIB)
    finally:
        cloud.stop()


def test_a_wait_asked_for_is_kept_and_a_refused_clip_is_not_resent(
    tmp_path: Path, port: int
) -> None:
    faults = Faults(wait_at=2, refuse_camera="bad")
    cloud = Cloud(tmp_path / "cloud", port, faults)
    dev = Device(tmp_path / "clips", f"127.0.0.1:{port}")
    try:
        path, cid = dev.clip(9 * KIB)
        bad, _ = dev.clip(KIB, camera="bad")
        with pytest.raises(UploadError, match="retry") as err:
            dev.uploader.run_pass()
        assert err.value.wait_s == pytest.approx(0.2)
        dev.uploader.run_pass()
        assert cid in cloud.store.complete and not path.exists()
        chunks = faults.chunks
        dev.uploader.run_pass()
        assert faults.chunks == chunks  # the refused clip is not sent again
        assert bad.exists()  # ... nor deleted: the folder's bound decides
        refused = dev.value("strata_device_clip_upload_failures_total", {"reason": "refused"})
        assert refused == 1
    finally:
        cloud.stop()


def test_an_open_clip_goes_as_it_grows_and_ends_with_its_final_chunk(
    tmp_path: Path, port: int
) -> None:
    cloud = Cloud(tmp_path / "cloud", port)
    dev = Device(tmp_path / "clips", f"127.0.0.1:{port}")
    try:
        path, cid = dev.clip(6 * KIB, final=False)
        dev.uploader.run_pass()
        assert cloud.bytes_of(cid) == path.read_bytes() and cid not in cloud.store.complete
        assert not cloud.store.infos[cid].final
        with open(path, "ab") as f:
            f.write(os.urandom(5 * KIB))
        dev.uploader.run_pass()
        assert cloud.bytes_of(cid) == path.read_bytes() and cid not in cloud.store.complete
        data = path.read_bytes()
        info = dev.spool.pending()[0].info
        dev.finish(path, info)
        dev.uploader.run_pass()
        assert cloud.bytes_of(cid) == data and cid in cloud.store.complete
        assert cloud.store.infos[cid].final and cloud.store.infos[cid].size_bytes == len(data)
    finally:
        cloud.stop()


def test_a_clip_cut_back_after_its_bytes_went_up_ends_as_that_prefix(
    tmp_path: Path, port: int
) -> None:
    # Issue 39: an open clip's bytes went up as it grew; then the cutter cut the file back
    # (its track's end heard late). Until its final info, the uploader waits (no failure);
    # then its last chunk says cut_back and the cloud keeps the prefix.
    cloud = Cloud(tmp_path / "cloud", port)
    dev = Device(tmp_path / "clips", f"127.0.0.1:{port}")
    try:
        path, cid = dev.clip(11 * KIB, final=False)
        dev.uploader.run_pass()
        assert cloud.bytes_of(cid) == path.read_bytes()
        os.truncate(path, 7 * KIB)
        dev.uploader.run_pass()  # cut back, not final yet: nothing to send, no failure
        assert dev.value("strata_device_clip_upload_failures_total", {"reason": "io"}) == 0
        assert len(cloud.bytes_of(cid)) == 11 * KIB
        dev.finish(path, dev.spool.pending()[0].info)
        data = path.read_bytes()
        dev.uploader.run_pass()
        assert cloud.bytes_of(cid) == data and len(data) == 7 * KIB
        assert cid in cloud.store.complete and not dev.spool.pending()
        assert cloud.store.infos[cid].size_bytes == 7 * KIB
    finally:
        cloud.stop()


def test_the_thread_uploads_through_an_outage_with_backoff(tmp_path: Path, port: int) -> None:
    dev = Device(tmp_path / "clips", f"127.0.0.1:{port}", poll_s=0.1, connect_timeout_s=1)
    path, cid = dev.clip(20 * KIB)
    dev.uploader.start()
    try:
        deadline = time.monotonic() + 20
        while dev.value("strata_device_clip_upload_failures_total", {"reason": "unavailable"}) < 2:
            assert time.monotonic() < deadline, "no failed try while the cloud is away"
            time.sleep(0.05)
        cloud = Cloud(tmp_path / "cloud", port)
        try:
            while path.exists():
                assert time.monotonic() < deadline, "not uploaded once the cloud is back"
                time.sleep(0.05)
            assert cid in cloud.store.complete
        finally:
            cloud.stop()
    finally:
        dev.uploader.stop()


def test_the_folder_keeps_under_its_bound_deleting_the_oldest(tmp_path: Path) -> None:
    dev = Device(tmp_path / "clips", "", spool_max_mib=25 / 1024)  # 25 KiB
    old, _ = dev.clip(10 * KIB)
    mid, _ = dev.clip(10 * KIB)
    new, _ = dev.clip(10 * KIB)
    live, _ = dev.clip(10 * KIB, final=False)
    dev.uploader.run_pass()  # no target: only the bound
    assert not old.exists() and not mid.exists() and new.exists() and live.exists()
    assert dev.value("strata_device_clips_spool_dropped_total") == 2
    assert dev.value("strata_device_clip_spool_bytes") == 20 * KIB


def test_plaintext_off_loopback_is_refused_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(UploadSetupError, match="refusing to upload clips in plaintext"):
        Device(tmp_path, "10.1.2.3:443")
    Device(tmp_path, "10.1.2.3:443", allow_insecure=True)
    Device(tmp_path, "localhost:443")
    Device(tmp_path, "10.1.2.3:443", tls=UplinkTlsConfig(enabled=True))
    assert target_host("dns:///cloud.example:443") == "cloud.example"
    assert target_host("[::1]:50051") == "::1"
    assert target_host("ipv4:127.0.0.1:1,127.0.0.1:2") == "127.0.0.1"
