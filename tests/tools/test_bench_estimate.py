"""The cascade bench reports the edge's estimated F1 beside the measured one."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from strata.edge.tracking.cascade import CascadeMetrics
from strata.shared.vision.agreement import Agreement
from strata.tools.bench import report
from strata.tools.bench.cascade import ClipResult, answers_by_how, estimated_f1
from strata.tools.demo.scrape import parse


def test_the_edges_estimate_from_its_metrics_beside_the_measured_f1() -> None:
    registry = CollectorRegistry()
    m = CascadeMetrics(registry)
    edge = parse(generate_latest(registry).decode())
    assert estimated_f1({"edge": edge}) is None and estimated_f1({}) is None
    m.estimated_accuracy.labels("cam0").set(0.86)
    m.estimated_accuracy.labels("cam1").set(0.9)
    got = estimated_f1({"edge": parse(generate_latest(registry).decode())})
    assert got == pytest.approx(0.88)
    a = Agreement(
        tagging=0.9,
        counting=0.9,
        f1=0.9,
        true_positives=9,
        false_positives=1,
        false_negatives=1,
        frames=10,
    )
    clip = ClipResult("vtest.mp4", 10, 3, 1, 100, 10.0, 1.0, a, estimated_f1=got)
    assert report.cascade_keys(clip)["cascade.estimated_f1"] == pytest.approx(0.88)
    (row,) = report._estimate_rows(clip)
    assert row.endswith("| | | 0.880 |") and "measured 0.900, off by -0.020" in row


def test_the_edges_answers_by_how_they_were_made() -> None:
    registry = CollectorRegistry()
    m = CascadeMetrics(registry)
    m.answers.labels("interpolated").inc(7)
    m.answers.labels("timeout").inc(2)
    edge = parse(generate_latest(registry).decode())
    assert answers_by_how({"edge": edge}) == {"interpolated": 7.0, "timeout": 2.0}
    assert answers_by_how({}) == {}
