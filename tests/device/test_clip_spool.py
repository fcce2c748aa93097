"""device/clips/spool.py: what a start takes back from a clips folder others share."""

from __future__ import annotations

from pathlib import Path

from strata.device.clips.spool import ClipSpool, write_sidecar
from strata.shared.config.device import ClipsConfig
from strata.shared.contracts import clips_pb2


def _clip(folder: Path, camera: str) -> None:
    path = folder / camera / "s1-0.mp4"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00" * 64)
    info = clips_pb2.ClipInfo(clip_id=f"{camera}/s1/0", camera_id=camera, final=True)
    write_sidecar(path, info, sync=False)


def test_recover_takes_back_only_the_cameras_it_owns(tmp_path: Path) -> None:
    for cam in ("a", "b", "c"):
        _clip(tmp_path, cam)
    spool = ClipSpool(ClipsConfig(dir=str(tmp_path)), "agent")
    found = spool.recover(owns=lambda camera: camera != "b")
    assert sorted(c.info.camera_id for c in found) == ["a", "c"]
    assert [c.info.camera_id for c in spool.pending()] == ["a", "c"]
    assert sorted(
        c.info.camera_id for c in ClipSpool(ClipsConfig(dir=str(tmp_path)), "x").recover()
    ) == ["a", "b", "c"]
