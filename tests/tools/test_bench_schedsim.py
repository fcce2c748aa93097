"""The batching simulator: both policies on the same traces, every frame accounted for."""

from __future__ import annotations

from pathlib import Path

from strata.edge.inference.scheduler import QLearningPolicy
from strata.shared.config.edge import SchedulerConfig
from strata.tools.bench.schedsim import (
    MEASURED_CPU_CURVE,
    ServiceModel,
    SimSetup,
    compare,
    make_trace,
    rule_policy,
    simulate,
)


def test_traces_are_deterministic_and_the_burst_is_ten_times() -> None:
    a = make_trace("burst10x", 4, 0.5, 200.0, seed=3)
    b = make_trace("burst10x", 4, 0.5, 200.0, seed=3)
    assert (a.times == b.times).all() and (a.cameras == b.cameras).all()
    inside = ((a.times >= 80) & (a.times < 120)).sum() / 40
    outside = ((a.times < 80) | (a.times >= 120)).sum() / 160
    assert 6 < inside / outside < 15


def test_every_offered_frame_is_answered_or_shed() -> None:
    setup = SimSetup(duration_s=120.0)
    trace = make_trace("burst10x", 4, 0.5, 120.0, seed=5)
    r = simulate(
        trace,
        rule_policy(setup),
        ServiceModel(MEASURED_CPU_CURVE, 0.1, 1),
        SchedulerConfig(),
        8,
        4,
    )
    assert r.answered + r.shed == r.offered == len(trace.times)
    assert r.shed > 0  # the 10x burst overflows the queues


def test_deadline_shedding_answers_within_the_deadline_and_accounts_every_frame() -> None:
    trace = make_trace("burst10x", 4, 0.5, 120.0, seed=5)
    late = simulate(
        trace,
        rule_policy(SimSetup()),
        ServiceModel(MEASURED_CPU_CURVE, 0.0, 1),
        SchedulerConfig(),
        8,
        4,
    )
    kept = simulate(
        trace, rule_policy(SimSetup()), ServiceModel(MEASURED_CPU_CURVE, 0.0, 1),
        SchedulerConfig(), 8, 4, deadline_s=1.0,
    )  # fmt: skip
    assert kept.answered + kept.shed == kept.offered == len(trace.times)
    assert late.p99_ms > 1000.0 >= kept.p99_ms  # no noise: the estimate is the service
    # What is shed would have missed the deadline anyway: goodput does not fall.
    assert kept.goodput_fps >= late.goodput_fps


def test_learned_beats_the_rule_on_the_10x_burst(tmp_path: Path) -> None:
    """Bounded: 30 min of simulated training, 5 min traces (a few seconds of CPU)."""
    setup = SimSetup(duration_s=300.0, train_s=1800.0)
    q = tmp_path / "q.json"
    results = compare(
        setup,
        SchedulerConfig(policy="learned"),
        MEASURED_CPU_CURVE,
        kinds=("burst10x",),
        q_table=str(q),
    )
    by = {r.policy: r for r in results}
    rule, learned = by["rule"], by["learned"]
    assert learned.p99_ms < 0.85 * rule.p99_ms, (rule, learned)
    assert learned.goodput_fps >= 0.98 * rule.goodput_fps
    # The trained table warm-starts a node's policy.
    p = QLearningPolicy(SchedulerConfig(policy="learned"), 8, 0.01)
    assert p.load(q) and p.visits.sum() > 0
