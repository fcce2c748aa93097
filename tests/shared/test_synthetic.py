import av
import numpy as np
from strata.shared.synthetic import CLASSES, SyntheticClip


def test_deterministic_and_truthful() -> None:
    a, b = SyntheticClip(frames=40, seed=3), SyntheticClip(frames=40, seed=3)
    busy = [i for i in range(40) if a.boxes(i)]
    assert busy and len(busy) < 40, "the clip needs both quiet and busy stretches"
    f = a.frame(busy[0])
    assert np.array_equal(f.image, b.frame(busy[0]).image)
    for box in f.boxes:
        assert 0 <= box.x1 < box.x2 <= a.width and 0 <= box.y1 < box.y2 <= a.height
        patch = f.image[box.y1 : box.y2, box.x1 : box.x2].reshape(-1, 3)
        assert (patch == CLASSES[box.class_id][1]).all(axis=1).mean() > 0.5


def test_write_decodes(tmp_path) -> None:
    clip = SyntheticClip(width=160, height=120, frames=12)
    path = clip.write(tmp_path / "c.mp4")
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    assert len(frames) == 12 and frames[0].shape == (120, 160, 3)
