"""Teacher labels of real clips: motion on the synthetic clip (truth known), HOG on vtest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision.boxes import iou
from strata.tools.distill.dataset import gate_set, verifier_set, write_detection_set
from strata.tools.distill.labels import ClipError, ClipLabels, label_clip, read_frames
from strata.tools.distill.teachers import HogTeacher

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[SyntheticClip, Path]:
    c = SyntheticClip(width=256, height=192, frames=80, fps=10, objects=4, seed=2)
    return c, c.write(tmp_path_factory.mktemp("distill") / "clip.mp4")


@pytest.fixture(scope="module")
def labels(clip: tuple[SyntheticClip, Path]) -> ClipLabels:
    return label_clip(clip[1], ("motion",), progress=False)


def test_motion_labels_find_the_moving_objects(
    clip: tuple[SyntheticClip, Path], labels: ClipLabels
) -> None:
    synth, _ = clip
    assert labels.frames == 80 and labels.holdout_start == 64
    hits = total = false = 0
    for i in range(labels.frames):
        truth = np.asarray([[b.x1, b.y1, b.x2, b.y2] for b in synth.boxes(i)], np.float32).reshape(
            -1, 4
        )
        got = labels.boxes[i].xyxy
        total += truth.shape[0]
        if truth.shape[0] and got.shape[0]:
            m = iou(truth, got)
            hits += int((m.max(axis=1) >= 0.5).sum())
            false += int((m.max(axis=0) < 0.5).sum())
        else:
            false += got.shape[0]
    # Tracks shorter than the motion-only minimum and objects entering at the border are
    # lost; the rest must be found, with few boxes where nothing is.
    assert hits >= 0.7 * total, (hits, total)
    assert false <= 0.1 * max(hits, 1), (false, hits)


def test_labels_round_trip(labels: ClipLabels, tmp_path: Path) -> None:
    labels.save(tmp_path / "lab")
    back = ClipLabels.load(tmp_path / "lab")
    assert back.frames == labels.frames and back.holdout_start == labels.holdout_start
    for a, b in zip(labels.boxes, back.boxes, strict=True):
        np.testing.assert_allclose(a.xyxy, b.xyxy)
        np.testing.assert_array_equal(a.sources, b.sources)
    assert back.stats == labels.stats


def test_held_out_frames_never_reach_a_training_split(labels: ClipLabels, tmp_path: Path) -> None:
    ds = write_detection_set([labels], tmp_path / "det")
    for split in ("train", "val"):
        idx = [int(p.stem.split("_")[1]) for p in (tmp_path / "det" / split / "images").iterdir()]
        assert idx and max(idx) < labels.holdout_start
    test_idx = sorted(int(p.stem.split("_")[1]) for p in (ds.test_dir / "images").iterdir())
    assert test_idx == list(range(labels.holdout_start, labels.frames))
    line = next(p for p in (tmp_path / "det" / "train" / "labels").iterdir() if p.stat().st_size)
    cls, *xywh = line.read_text().split("\n")[0].split()
    assert cls == "0" and all(0.0 <= float(v) <= 1.0 for v in xywh)
    gate = gate_set([labels], size=64)
    assert set(gate.train_y.tolist()) == {0, 1} and gate.test_x.shape[1:] == (64, 64, 3)
    ver = verifier_set([labels], size=32)
    assert ver.train_x.shape[0] > 0 and 1 in ver.train_y.tolist() and 0 in ver.train_y.tolist()


def test_bad_clip_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not_a_video.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(ClipError):
        label_clip(bad, ("motion",), progress=False)
    with pytest.raises(ValueError, match="unknown teacher"):
        label_clip(bad, ("yolo9000",), progress=False)


def test_hog_teacher_finds_people_in_vtest() -> None:
    path = ROOT / "data" / "vtest.avi"
    if not path.exists():
        pytest.skip("data/vtest.avi missing: run `python .ci/test_data.py`")
    hog = HogTeacher()
    frames = [f for i, f in enumerate(read_frames(path)) if i in (0, 400)]
    found = [len(hog.detect(f)) for f in frames]
    assert all(n >= 1 for n in found), found
