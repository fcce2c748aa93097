"""tools/bench/cameras.py: the search for the most cameras (no timing here)."""

from __future__ import annotations

import pytest
from strata.tools.bench.cameras import Trial, most_cameras


@pytest.mark.parametrize(
    ("capacity", "limit"), [(0, 64), (1, 64), (5, 64), (8, 64), (37, 64), (64, 64), (70, 64)]
)
def test_most_cameras_finds_the_capacity_with_few_trials(capacity: int, limit: int) -> None:
    def trial(n: int) -> Trial:
        return Trial(n, n <= capacity, 0.0 if n <= capacity else 2.0, n * 10, 1.0, 0.0)

    most, trials = most_cameras(trial, limit)
    assert most == min(capacity, limit)
    assert len(trials) <= 2 * 7  # doubling then bisection: logarithmic in the limit
    assert all(t.carried == (t.cameras <= capacity) for t in trials)
