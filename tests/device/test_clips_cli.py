"""`strata device-clips`: a clips folder as the agent leaves it, listed and served."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clip_testkit import first_seconds
from strata.device.clips.spool import write_sidecar
from strata.shared.contracts import clips_pb2
from strata.tools.cli import main


@pytest.fixture
def folder(tmp_path: Path, vtest_mp4: Path) -> Path:
    clips = tmp_path / "clips"
    done = clips / "door" / "s1-1.mp4"
    done.parent.mkdir(parents=True)
    first_seconds(vtest_mp4, done, 2.0, fragmented=True, inclusive=True)
    info = clips_pb2.ClipInfo(
        clip_id="door/s1/1",
        camera_id="door",
        track_uids=["1000-7", "1200-8"],
        start_ns=1_000_000_000,
        end_ns=3_000_000_000,
        outcome=clips_pb2.CLIP_OUTCOME_COMPLETE,
        size_bytes=done.stat().st_size,
        final=True,
    )
    write_sidecar(done, info, sync=False)
    # A clip the agent is still cutting: its first sidecar not written yet.
    first_seconds(vtest_mp4, clips / "door" / "s1-2.mp4", 1.0, fragmented=True, inclusive=True)
    return clips


def test_lists_every_clip_with_its_state(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device-clips", "--dir", str(folder), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_id = {r["clip_id"]: r for r in rows}
    assert set(by_id) == {"door/s1/1", "door/s1/2"}
    assert by_id["door/s1/1"]["state"] == "complete"
    assert by_id["door/s1/1"]["track_uids"] == ["1000-7", "1200-8"]
    assert by_id["door/s1/2"]["state"] == "open"
    assert all(r["bytes"] > 0 for r in rows)


def test_serves_a_clip_by_track_and_it_decodes(folder: Path, tmp_path: Path) -> None:
    import av

    out = tmp_path / "got.mp4"
    assert main(["device-clips", "--dir", str(folder), "door/1200-8", "-o", str(out)]) == 0
    assert out.read_bytes() == (folder / "door" / "s1-1.mp4").read_bytes()
    with av.open(str(out)) as f:
        first = next(f.decode(video=0))
    assert first.width == 768


def test_an_unknown_clip_or_folder_is_a_clear_error(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.mp4"
    assert main(["device-clips", "--dir", str(folder), "nope", "-o", str(out)]) == 1
    assert "no clip with bytes for 'nope'" in capsys.readouterr().err
    assert not out.exists()
    assert main(["device-clips", "--dir", str(tmp_path / "none")]) == 1
    assert "no clips folder" in capsys.readouterr().err
