"""tools/bench/cameras.py: the search for the most cameras (no timing here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.tools.bench.cameras import Trial, most_cameras
from strata.tools.bench.sink_process import StandInEdge


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


def test_grid_is_parsed_and_a_bad_one_says_what_is_wrong() -> None:
    from strata.tools.bench.cameras import parse_grid

    assert parse_grid("1920x1080@25, 1280x720@10") == (((1920, 1080), 25), ((1280, 720), 10))
    with pytest.raises(ValueError, match="'720p' is not WIDTHxHEIGHT@FPS"):
        parse_grid("720p")


def test_an_agent_trial_plays_every_camera_and_reads_each_ones_worst_lag(
    tmp_path: Path,
) -> None:
    from strata.tools.bench.cameras import AgentSide, agent_trial, make_clip

    clip = make_clip(tmp_path / "small.mp4", (160, 120), 20, 20)
    t = agent_trial(clip, 2, max_lag_s=1.0, side=AgentSide(stand_in=StandInEdge(320)))
    assert t.carried and t.given_up == 0
    assert t.frames == 40 and 0.0 <= t.max_lag_s < 1.0
    assert t.seconds >= 0.9  # played at its rate, not read as fast as it decodes
    late = agent_trial(clip, 1, max_lag_s=-1.0)  # any lag, even 0, is too much
    assert not late.carried
