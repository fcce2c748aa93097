"""`strata bench rules`: the part over the real daemons, its agreement measures, and the
TrackFrames it builds from published tracks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from strata.edge.rules.events import DWELL_EXCEEDED, IN, LINE_CROSSED, NEW, OUT, ZONE_ENTERED
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import events_pb2
from strata.tools.bench.rules import (
    CAMERA,
    COST_TRACKS,
    VTEST_RULES,
    BenchSetup,
    Collected,
    evaluate,
    rules_config,
    synthetic_frames,
    synthetic_rules,
    time_engine,
)
from strata.tools.bench.rules_agreement import (
    RuleHit,
    RuleKey,
    compare,
    count_agreement,
    matched,
    rule_hit,
)
from strata.tools.bench.rules_frames import FrameSource, Tracked, replay_rules, track_frames

NS = 1_000_000_000


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_the_rules_part_reports_every_key_and_the_reference_agrees_with_itself(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rules.json"
    cmd = [sys.executable, "-m", "strata.tools.cli", "bench", "rules", "--quick"]
    cmd += ["--out", str(tmp_path / "work"), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "strata bench rules " + " ".join(cmd[5:])
    # vtest's first 40 frames: the COCO detector sees its people (issue 38).
    assert doc["clip"] == "vtest-first40.mp4" and doc["frames_total"] == 40
    assert doc["rules.reference_self_agreement"] == 1.0
    assert set(doc["runs"]) == {"reference", "cascade", "uniform"}
    assert set(doc["agreement"]) == {
        "reference_self",
        "reference_replay",
        "cascade",
        "cascade_replay",
        "uniform",
    }
    ref = doc["runs"]["reference"]
    assert ref["share_to_edge"] == 1.0 and ref["source"] in ("edge", "replay")
    # The reference saw the synthetic objects: there is something to agree about.
    assert ref["tracks"] >= 1 and ref["rule_results"] >= 1, ref
    self_a = doc["agreement"]["reference_self"]
    assert self_a["count_agreement"] == 1.0 and self_a["f1"] == 1.0
    assert all(r["count"] == r["reference"] for r in self_a["per_rule"].values())
    for run in ("cascade", "uniform"):
        assert 0 < doc["runs"][run]["share_to_edge"] <= 1
        for key in ("count_agreement", "f1", "worst_count_agreement"):
            assert 0 <= doc["agreement"][run][key] <= 1, (run, key)
        assert doc["runs"][run]["duplicate_ends"] == 0
    assert doc["runs"]["uniform"]["frames_detected"] == pytest.approx(
        doc["runs"]["cascade"]["frames_detected"], abs=1
    )
    assert [c["tracks"] for c in doc["cost"]["synthetic"]] == list(COST_TRACKS)
    assert all(c["per_track_frame_us"] > 0 for c in doc["cost"]["synthetic"])
    assert doc["rules.cost_per_track_frame_us"] > 0
    assert doc["machine"]["cores"] >= 1 and "load_avg_1m_at_end" in doc["machine"]
    md = (tmp_path / "work" / "rules.md").read_text()
    assert "| rule | reference |" in md and "per track per frame" in md


# ---- agreement -----------------------------------------------------------------------------


def test_count_agreement_is_one_less_the_relative_error_floored_at_zero() -> None:
    assert count_agreement(10, 10) == 1.0
    assert count_agreement(9, 10) == pytest.approx(0.9)
    assert count_agreement(11, 10) == pytest.approx(0.9)
    assert count_agreement(0, 0) == 1.0
    assert count_agreement(1, 0) == 0.0  # max(ref, 1): one spurious event of none
    assert count_agreement(25, 10) == 0.0


def test_matched_pairs_each_event_once_within_the_tolerance() -> None:
    assert matched([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 0.0) == 3
    assert matched([1.0, 1.1], [1.05], 0.1) == 1  # one reference event, used once
    assert matched([5.0], [3.9], 1.0) == 0
    assert matched([5.0], [4.0], 1.0) == 1
    # Greedy nearest-first would pair 1.0 with 1.4 and leave 0.5 and 1.9 alone; the most
    # pairs is two.
    assert matched([1.0, 1.9], [0.5, 1.4], 0.5) == 2
    assert matched([], [1.0], 1.0) == 0


def _hits(kind: str, name: str, times: list[float], direction: str = "") -> list[RuleHit]:
    return [RuleHit(RuleKey(kind, name, direction), t, True) for t in times]


def test_compare_scores_each_key_apart_and_sums_errors_over_keys() -> None:
    ref = _hits("line_crossed", "west", [1, 5, 9], "in") + _hits("zone_entered", "plaza", [2, 4])
    ours = _hits("line_crossed", "west", [1.2, 5.5, 9.3, 12], "in") + _hits(
        "line_crossed", "west", [3], "out"
    )
    a = compare(ours, ref, 1.0)
    by = {str(k.key): k for k in a.keys}
    assert set(by) == {"line_crossed west in", "line_crossed west out", "zone_entered plaza"}
    west = by["line_crossed west in"]
    assert (west.count, west.reference, west.matched) == (4, 3, 3)
    assert west.f1 == pytest.approx(6 / 7)
    assert by["zone_entered plaza"].count_agreement == 0.0
    assert by["line_crossed west out"].count_agreement == 0.0
    # |4 - 3| + |1 - 0| + |0 - 2| = 4 errors over 5 reference events: the surplus on one
    # key does not hide the shortfall on another.
    assert a.count_agreement == pytest.approx(1 - 4 / 5)
    assert a.f1 == pytest.approx(2 * 3 / (5 + 5))
    assert a.worst_count_agreement == 0.0
    same = compare(ref, ref, 0.0)
    assert same.count_agreement == 1.0 and same.f1 == 1.0
    late = compare([RuleHit(h.key, h.time_s + 10, True) for h in ref], ref, 1.0)
    assert late.count_agreement == 1.0 and late.f1 == 0.0  # right counts, wrong moments
    assert compare([], [], 1.0).f1 == 1.0


def test_rule_hit_keys_crossings_by_line_and_direction_and_skips_lifecycle() -> None:
    def ev(kind: int, **kw: object) -> events_pb2.TrackEvent:
        return events_pb2.TrackEvent(type=kind, **kw)  # type: ignore[arg-type]

    crossing = rule_hit(ev(LINE_CROSSED, line="east", direction=OUT, observed=True), 3.0)
    assert crossing == RuleHit(RuleKey("line_crossed", "east", "out"), 3.0, True)
    entry = rule_hit(ev(ZONE_ENTERED, zone="plaza", rule="plaza"), 1.0)
    assert entry is not None and entry.key == RuleKey("zone_entered", "plaza")
    assert not entry.observed
    dwell = rule_hit(ev(DWELL_EXCEEDED, zone="plaza", rule="linger"), 1.0)
    assert dwell is not None and dwell.key == RuleKey("dwell_exceeded", "linger")
    assert rule_hit(ev(NEW), 0.0) is None


# ---- TrackFrames from published tracks -----------------------------------------------------


def _walk(
    track: int, xs: list[float], detected: list[bool], y: float = 400.0, start: int = 0
) -> list[Tracked]:
    out = []
    for i, (x, det) in enumerate(zip(xs, detected, strict=True)):
        out.append(
            Tracked(
                index=start + i,
                capture_ns=(start + i) * NS // 10,
                boxes=np.array([[x - 20, y - 80, x + 20, y]], np.float64),
                scores=np.array([0.9]),
                class_ids=np.array([0]),
                track_ids=np.array([track], np.uint64),
                detected=det,
            )
        )
    return out


SOURCE = FrameSource(CAMERA, (768, 576), ("person",))


def test_track_frames_confirm_after_min_hits_and_mark_predicted_boxes_unobserved() -> None:
    frames = _walk(3, [100, 110, 120, 130], [True, False, True, True])
    built = track_frames(frames, SOURCE, TrackingConfig(min_hits=2))
    assert [bool(f.confirmed[0]) for f in built] == [False, False, True, True]
    assert [bool(f.observed[0]) for f in built] == [True, False, True, True]
    assert all(f.labels == ("person",) and f.frame_size == (768, 576) for f in built)
    # Untracked boxes (id 0) never reach the rules.
    zero = Tracked(
        9, 0, np.zeros((1, 4)), np.ones(1), np.zeros(1, np.int64), np.zeros(1, np.uint64), True
    )
    assert len(track_frames([zero], SOURCE, TrackingConfig())[0]) == 0


def test_track_frames_end_a_track_unseen_past_max_lost_once() -> None:
    tracking = TrackingConfig(max_lost=2)
    frames = _walk(1, [100, 110], [True, True]) + _walk(2, [300] * 4, [True] * 4, start=2)
    built = track_frames(frames, SOURCE, tracking)
    assert [f.ended for f in built] == [(), (), (), (), (1,), ()]


def test_vtest_lines_count_a_rightward_walk_in_and_a_leftward_walk_out() -> None:
    rules = rules_config(VTEST_RULES)
    xs = np.linspace(0.2, 0.8, 31) * 768
    right = _walk(1, xs.tolist(), [True] * 31, y=0.6 * 576)
    left = _walk(2, xs[::-1].tolist(), [i % 3 == 0 for i in range(31)], y=0.6 * 576, start=31)
    events = replay_rules(track_frames(right + left, SOURCE, TrackingConfig()), rules)
    crossed = [
        (e.track_id, e.line, e.direction, e.observed) for e in events if e.type == LINE_CROSSED
    ]
    assert sorted(crossed[:2]) == [(1, "east", IN, True), (1, "west", IN, True)]
    assert sorted((t, ln, d) for t, ln, d, _ in crossed[2:]) == [(2, "east", OUT), (2, "west", OUT)]


def test_saved_runs_are_evaluated_again_without_the_daemons(tmp_path: Path) -> None:
    rules = rules_config(VTEST_RULES)
    xs = (np.linspace(0.2, 0.8, 31) * 768).tolist()
    ref = _walk(1, xs, [True] * 31, y=0.6 * 576, start=1)
    # The cascade: one frame in five detected, the rest answered by the tracker.
    cas = _walk(5, xs, [i % 5 == 0 for i in range(31)], y=0.6 * 576, start=1)
    ref_events = replay_rules(track_frames(ref, SOURCE, TrackingConfig()), rules)
    Collected(ref, cas, ref_events, [], ("person",), (768, 576), 10.0, ("a note",)).save(tmp_path)
    got = Collected.load(tmp_path)
    assert [f.index for f in got.cascade] == [f.index for f in cas]
    assert [f.detected for f in got.cascade] == [f.detected for f in cas]
    assert all(np.array_equal(a.boxes, b.boxes) for a, b in zip(got.cascade, cas, strict=True))
    assert [e.SerializeToString() for e in got.reference_events] == [
        e.SerializeToString() for e in ref_events
    ]
    assert got.cascade_events == [] and got.fps == 10.0 and got.notes == ("a note",)
    setup = BenchSetup(tmp_path / "absent.mp4", tmp_path, VTEST_RULES, cost_frames=3)
    body = evaluate(got, setup, progress=lambda _line: None)
    runs, a = body["runs"], body["agreement"]
    assert runs["reference"]["source"] == "edge" and runs["cascade"]["source"] == "replay"
    assert runs["cascade"]["share_to_edge"] == pytest.approx(7 / 32)
    assert a["reference_self"]["count_agreement"] == 1.0 and a["reference_replay"]["f1"] == 1.0
    # Both walks cross both lines rightwards, whichever frames were detected.
    per_rule = a["cascade"]["per_rule"]
    assert (
        per_rule["line_crossed west in"]["count"] == per_rule["line_crossed east in"]["count"] == 1
    )
    assert a["cascade"]["count_agreement"] == 1.0 and a["cascade_replay"] == a["cascade"]
    assert body["notes"] == ["a note"]
    # Uniform at every other phase of its spacing (1 in 5 here): the walk crosses anyway.
    assert [p["shift"] for p in body["uniform_phases"]] == [1, 2, 3, 4]
    assert all(p["count_agreement"] == 1.0 for p in body["uniform_phases"])


def test_time_engine_reports_per_track_and_per_frame_microseconds() -> None:
    frames = synthetic_frames(5, 20)
    cost = time_engine(frames, synthetic_rules())
    assert cost["frames"] == 19 and cost["track_frames"] == 95
    assert cost["per_frame_us"] == pytest.approx(cost["per_track_frame_us"] * 5)
    assert time_engine(frames[:1], synthetic_rules())["frames"] == 0


@pytest.mark.timeout(30)
def test_the_event_tap_takes_the_edges_event_copies_and_not_its_results() -> None:
    import time

    import zmq
    from strata.shared.contracts import frame_pb2
    from strata.tools.bench.rules_frames import EVENTS_TOPIC, EventTap

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    tap = EventTap(f"tcp://127.0.0.1:{port}")
    try:
        results = frame_pb2.FrameDetections(camera_id=CAMERA, frame_index=1)
        deadline = time.monotonic() + 10
        # Until the subscription has reached the publisher (PUB drops before it).
        while not tap.events() and time.monotonic() < deadline:
            pub.send_multipart([CAMERA.encode() + b"\0", results.SerializeToString()])
            event = events_pb2.TrackEvent(camera_id=CAMERA, track_id=3, sequence=1)
            pub.send_multipart([EVENTS_TOPIC + CAMERA.encode() + b"\0", event.SerializeToString()])
            time.sleep(0.05)
        got = tap.events()
        assert got and all((e.camera_id, e.track_id) == (CAMERA, 3) for e in got)
        assert tap.malformed == 0
    finally:
        tap.close()
        pub.close(0)
        ctx.term()
