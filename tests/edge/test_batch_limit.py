"""The adaptive batch limit: halved while the queue-delay target is missed, doubled back."""

from __future__ import annotations

from strata.edge.overload.batch_limit import AdaptiveBatchLimit


def test_the_batch_limit_halves_then_recovers() -> None:
    d = AdaptiveBatchLimit(max_batch=8, min_batch=2, target_s=0.1, window=2)
    assert d.observe([0.3, 0.3]) == 8  # window not complete
    assert d.observe([0.3]) == 4
    d.observe([0.3])
    assert d.observe([0.3]) == 2
    d.observe([0.3])
    assert d.observe([0.3]) == 2  # never under min_batch
    d.observe([0.01])
    assert d.observe([0.01]) == 4
    off = AdaptiveBatchLimit(8, 1, 0.0, 1)
    assert off.observe([10.0]) == 8
