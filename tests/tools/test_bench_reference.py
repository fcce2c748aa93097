"""The cascade bench's reference: every frame answered, or no figures at all."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
from strata.shared.config.base import merge
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.bench import accuracy
from strata.tools.bench.cascade import (
    GATES_OFF,
    NO_SHEDDING,
    Labels,
    ReferenceHolesError,
    boxes_of,
    clip_shape,
    reference_frames,
    reference_overrides,
    run_once,
    scaled_reference,
)


def _boxes(n: int) -> FrameBoxes:
    return FrameBoxes.of(np.full((n, 4), 10.0, np.float32), np.zeros(n, np.int32))


def test_a_reference_with_holes_is_refused_with_the_count_and_why() -> None:
    boxes = {i: _boxes(1) for i in range(10) if i not in (3, 7)}
    why = {"device.spool_full": 2.0}
    with pytest.raises(ReferenceHolesError) as err:
        reference_frames("c.mp4", boxes, 10, why)
    assert (err.value.missing, err.value.total, err.value.why) == (2, 10, why)
    assert "2 of 10 reference frames" in str(err.value)
    assert "device.spool_full 2" in str(err.value)


def test_a_complete_reference_is_every_frame_in_order() -> None:
    boxes = {i: _boxes(i % 3) for i in range(5)}
    frames = reference_frames("c.mp4", boxes, 5, {})
    assert [len(f.boxes) for f in frames] == [0, 1, 2, 0, 1]


def test_the_bench_prints_the_holes_instead_of_figures_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def holes(*_a: object) -> list[object]:
        raise ReferenceHolesError("vtest.mp4", 198, 795, {"device.degraded_rate": 198.0})

    monkeypatch.setattr(accuracy, "run_cascade", holes)
    args = Namespace(out=str(tmp_path), quick=True, vtest=None, no_vtest=True, json=None, clip=None)
    args.frames, args.model_repository, args.model = 0, "", "yolov8n"
    args.encoding, args.footage, args.footage_fps = "jpeg", [], 0.0
    args.jpeg_quality, args.uniform_through_codec = None, False
    args.command_line = "strata bench cascade"
    assert accuracy.run(args) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["reference_holes"]["frames_without_answer"] == 198
    assert doc["reference_holes"]["drops_by_reason"] == {"device.degraded_rate": 198.0}
    assert not any(k.startswith("cascade") for k in doc)


def test_the_reference_sees_the_frames_at_the_detectors_size_from_the_first() -> None:
    assert scaled_reference(None) == {}
    payload = merge(GATES_OFF, scaled_reference((320, 320)))["device"]["payload"]
    assert (payload["max_width"], payload["max_height"]) == (320, 320)
    assert merge(GATES_OFF, scaled_reference((320, 320)))["device"]["sender"]["encoding"] == "bgr"


def test_the_spool_holds_the_whole_clip_read_unpaced(tmp_path: Path) -> None:
    o = reference_overrides(795, 768, 576)
    assert o["device"]["source"]["realtime"] is False
    assert o["device"]["degrade"]["enabled"] is False
    assert o["device"]["sender"]["spool_frames"] >= 795
    assert o["device"]["sender"]["spool_mb"] * 2**20 >= 795 * 768 * 576 * 3


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_quick_reference_run_on_the_synthetic_clip_has_no_holes(tmp_path: Path) -> None:
    clip = SyntheticClip(width=320, height=240, frames=30, fps=10, objects=3, seed=2)
    path = clip.write(tmp_path / "s.mp4")
    assert clip_shape(path) == (30, 320, 240)
    cfg = merge(merge(NO_SHEDDING, GATES_OFF), reference_overrides(*clip_shape(path)))
    out = run_once(tmp_path / "ref", path, cfg, 240.0)
    frames = reference_frames(path.name, boxes_of(out.results, Labels()), 30, {})
    assert len(frames) == 30
