"""cloud/classify/batcher.py: the dynamic batcher."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def test_adaptive_close_waits_only_for_requests_that_can_come(tmp_path: Path) -> None:
    """One caller at a time: no queue delay; callers that overlap: the delay, batched."""
    import time

    from cloud_models import build_colour_classifier
    from strata.cloud.classify.batcher import DynamicBatcher
    from strata.cloud.classify.classifier import load_classifier
    from strata.cloud.metrics import CloudMetrics
    from strata.shared.config.cloud import CloudBatcherConfig, CloudModelConfig
    from strata.shared.metrics import sample

    model = build_colour_classifier(tmp_path / "c.onnx", size=32)
    clf = load_classifier(CloudModelConfig(path=str(model)), "")
    metrics = CloudMetrics()
    cfg = CloudBatcherConfig(max_batch=8, max_queue_delay_ms=2000)
    batcher = DynamicBatcher(clf, cfg, metrics)
    batcher.start()
    img = np.zeros((32, 32, 3), np.uint8)
    try:
        t0 = time.monotonic()
        for _ in range(3):
            batcher.submit(img).result(10)
        assert time.monotonic() - t0 < 1.5  # a fixed 2 s delay would take 6 s
        # Three in flight at once: callers overlap, so the delay applies again and they are
        # batched (the first may go alone, decided before the others arrived).
        futs = [batcher.submit(img) for _ in range(3)]
        for f in futs:
            f.result(10)
        t1 = time.monotonic()
        futs = [batcher.submit(img) for _ in range(3)]
        for f in futs:
            f.result(10)
        assert time.monotonic() - t1 >= 1.5  # waited for more, up to the 2 s delay
        reg = metrics.registry
        assert sample(reg, "strata_cloud_batch_size_sum") == 9
        assert sample(reg, "strata_cloud_batch_size_count") <= 6  # 3 alone, then batched
    finally:
        batcher.stop()
        clf.close()
