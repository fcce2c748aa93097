"""The camera's reconnect backoff (device/camera.py: backoff_delay) with an injected random
source: doubling from backoff_initial_s, capped at backoff_max_s, each wait scaled by a
factor in 1 +/- backoff_jitter. The same on a real RTSP outage: tests/device/test_rtsp.py."""

from __future__ import annotations

import random

import pytest
from strata.device.camera import backoff_delay
from strata.shared.config.device import SourceConfig


class Fixed(random.Random):
    """uniform() always returns one end or the middle of its range: the jitter's extremes."""

    def __init__(self, where: float) -> None:
        super().__init__(0)
        self.where = where

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.where


def test_the_wait_doubles_then_stays_at_the_cap() -> None:
    cfg = SourceConfig(backoff_initial_s=0.5, backoff_max_s=30.0, backoff_jitter=0.0)
    waits = [backoff_delay(a, cfg, random.Random(1)) for a in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


@pytest.mark.parametrize(("where", "factor"), [(0.0, 0.75), (0.5, 1.0), (1.0, 1.25)])
def test_jitter_scales_each_wait_within_its_bounds(where: float, factor: float) -> None:
    cfg = SourceConfig(backoff_initial_s=0.2, backoff_max_s=1.0, backoff_jitter=0.25)
    for attempt, base in ((1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (12, 1.0)):
        assert backoff_delay(attempt, cfg, Fixed(where)) == pytest.approx(base * factor)


def test_jitter_spreads_waits_over_the_whole_band() -> None:
    cfg = SourceConfig(backoff_initial_s=1.0, backoff_max_s=4.0, backoff_jitter=0.25)
    rng = random.Random(7)
    waits = [backoff_delay(9, cfg, rng) for _ in range(2000)]
    assert all(3.0 <= w <= 5.0 for w in waits)
    # Spread over the band, not bunched: cameras that lost one server do not retry together.
    assert min(waits) < 3.1 and max(waits) > 4.9
    assert sum(waits) / len(waits) == pytest.approx(4.0, abs=0.05)
    assert len({round(w, 3) for w in waits}) > 1000
