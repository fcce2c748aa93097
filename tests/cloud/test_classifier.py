"""cloud/classify/classifier.py: the batch buffer's normalization."""

from __future__ import annotations

import numpy as np
from strata.cloud.classify.classifier import BatchBuffer, Normalization


def test_batch_buffer_matches_reference_normalization() -> None:
    norm = Normalization((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    buf = BatchBuffer(4, 8, norm)
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (8, 8, 3), np.uint8) for _ in range(3)]
    out = buf.fill(imgs)
    assert out.shape == (3, 3, 8, 8)
    for i, img in enumerate(imgs):
        rgb = img[:, :, ::-1].astype(np.float32) / 255.0
        want = ((rgb - np.array(norm.mean)) / np.array(norm.std)).transpose(2, 0, 1)
        np.testing.assert_allclose(out[i], want, atol=1e-5)
    bgr = BatchBuffer(1, 8, Normalization((0, 0, 0), (1, 1, 1), 1.0, rgb=False))
    np.testing.assert_array_equal(bgr.fill(imgs[:1])[0], imgs[0].transpose(2, 0, 1))
