"""The cascade bench's clips made from a source: decodable, of the stated length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strata.shared.synthetic import SyntheticClip
from strata.tools.bench.cascade import clip_shape
from strata.tools.cascade_clips import (
    PanRecipe,
    QuietRecipe,
    crop_offsets,
    footage,
    head,
    make,
    pans_clip,
    quiet_clip,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    clip = SyntheticClip(width=320, height=240, frames=40, fps=10, objects=3, seed=5)
    return clip.write(tmp_path / "src.mp4")


def _decode(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as f:
        return [fr.to_ndarray(format="gray") for fr in f.decode(video=0)]


def test_the_quiet_clip_is_passages_between_empty_street(source: Path, tmp_path: Path) -> None:
    recipe = QuietRecipe(passages=2, passage_s=1.0, gap_s=1.5, noise=2.0)
    out = tmp_path / "quiet.mp4"
    assert quiet_clip(source, out, recipe) == 3 * 15 + 2 * 10
    frames = _decode(out)
    assert len(frames) == 65 and clip_shape(out) == (65, 320, 240)
    # The empty street moves only by noise and light; a passage differs from it.
    street = [np.abs(frames[i].astype(int) - frames[i + 1]).mean() for i in range(13)]
    assert max(street) < 4.0


def test_the_pans_clip_keeps_every_frame_cropped(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "pans.mp4"
    assert pans_clip(source, out, PanRecipe(crop=0.8, segment_s=1.0, pan_px=4)) == 40
    assert clip_shape(out) == (40, 256, 192)
    assert len(_decode(out)) == 40


def test_crop_offsets_hold_pan_and_cut() -> None:
    off = crop_offsets(30, (64, 48), 10, 4)
    assert (off[:10] == off[0]).all()  # still
    assert (np.diff(off[10:20, 0]) != 0).all()  # panning
    assert not (off[20] == off[19]).all()  # a cut
    assert (off[:, 0] <= 64).all() and (off[:, 1] <= 48).all() and (off >= 0).all()


def test_a_short_bench_takes_the_first_frames_of_a_clip(source: Path, tmp_path: Path) -> None:
    out = make("pans", source, tmp_path, frames=12)
    assert out.name == "pans-src-first12.mp4" and clip_shape(out) == (12, 256, 192)
    whole = make("vtest", source, tmp_path)
    assert whole == source
    first = make("vtest", source, tmp_path, frames=7)
    assert first.name == "src-first7.mp4" and clip_shape(first) == (7, 320, 240)
    assert head(source, tmp_path / "h.mp4", 100) == 40  # no more than the clip has


def test_footage_of_ones_own_is_re_encoded_whole_or_its_first_frames(
    source: Path, tmp_path: Path
) -> None:
    whole = footage(source, tmp_path / "clips")
    assert whole.name == "footage-src.mp4" and clip_shape(whole) == (40, 320, 240)
    first = footage(source, tmp_path / "clips", frames=9)
    assert first.name == "footage-src-first9.mp4" and clip_shape(first) == (9, 320, 240)
    slower = footage(source, tmp_path / "clips", fps=5)  # 10 fps source: every other frame
    assert slower.name == "footage-src-5fps.mp4" and clip_shape(slower) == (20, 320, 240)
    with pytest.raises(FileNotFoundError, match="--footage"):
        footage(tmp_path / "absent.mp4", tmp_path / "clips")
