from __future__ import annotations

import numpy as np
import pytest
from strata.shared.models import InputSpec
from strata.tools.models.inputs import prepare


def test_letterbox_input_is_rgb_scaled_and_padded() -> None:
    spec = InputSpec(name="images", shape=(None, 3, 64, 64), resize="letterbox", colour="RGB")
    frame = np.zeros((100, 200, 3), np.uint8)
    frame[:, :] = (0, 0, 255)  # pure red in BGR
    x = prepare(spec, [frame, frame])
    assert x.shape == (2, 3, 64, 64) and x.dtype == np.float32
    assert x[1, 0, 32, 32] == pytest.approx(1.0)  # R first
    assert x[1, 2, 32, 32] == pytest.approx(0.0)
    assert x[1, 0, 0, 0] == pytest.approx(114 / 255)  # padding above the image


def test_stretch_input_normalises_per_channel_in_model_order() -> None:
    spec = InputSpec(
        name="x", shape=(1, 3, 8, 8), colour="RGB", mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0)
    )
    frame = np.zeros((16, 16, 3), np.uint8)
    frame[:, :, 2] = 255  # red
    x = prepare(spec, [frame])
    np.testing.assert_allclose(x[0, :, 0, 0], [2.0, -1.0, -0.5], rtol=1e-6)
    with pytest.raises(ValueError, match="uint8 BGR"):
        prepare(spec, [np.zeros((8, 8), np.uint8)])
