"""The gate bench's clips: the real-foliage `tree` clip and the error when its source is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def test_tree_fills_the_top_left_quarter_forth_and_back(tmp_path: Path) -> None:
    import av
    import cv2
    from strata.shared.synthetic import SyntheticClip
    from strata.tools.bench.gate import _tree

    # A 4-frame "tree" at 10 fps over a 10 fps scene: frames 0 1 2 3 2 1 0 1 ...
    tree = SyntheticClip(width=64, height=64, frames=4, fps=10, seed=3).write(tmp_path / "t.mp4")
    with av.open(str(tree)) as f:
        leaves = [fr.to_ndarray(format="bgr24") for fr in f.decode(video=0)]
    leaves = [
        cv2.resize(leaf, (64, 48), interpolation=cv2.INTER_AREA).astype(int) for leaf in leaves
    ]
    scene = [np.full((96, 128, 3), 40 + i, np.uint8) for i in range(8)]
    out = list(_tree(iter(scene), tree, fps=10.0))
    assert len(out) == 8
    quarter = [o[:48, :64].astype(int) for o in out]
    order = [int(np.argmin([np.abs(q - leaf).mean() for leaf in leaves])) for q in quarter]
    assert order == [0, 1, 2, 3, 2, 1, 0, 1]
    for i, o in enumerate(out):
        # The rest of the frame is the scene's, untouched.
        assert (o[48:] == 40 + i).all() and (o[:, 64:] == 40 + i).all()


def test_a_missing_tree_clip_says_how_to_get_it(tmp_path: Path) -> None:
    from strata.tools.bench.gate import check_clip

    with pytest.raises(SystemExit, match=r"test_data.py --unseen.*--clips vtest,quiet"):
        check_clip("tree", tmp_path / "absent.mp4")
    with pytest.raises(SystemExit, match="unknown clip 'snow'"):
        check_clip("snow", tmp_path / "absent.mp4")
    check_clip("foliage", tmp_path / "absent.mp4")  # made from vtest alone: no error
