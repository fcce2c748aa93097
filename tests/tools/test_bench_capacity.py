"""`strata bench capacity`: the search's stopping rule, alone and on a stand-in edge (a real
process with a set service time), the replay's back-pressure, and the baseline's error."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.vision.boxes import FrameBoxes
from strata.shared.wire import current_version
from strata.tools.bench.capacity import EdgeServer
from strata.tools.bench.capacity_replay import Recording, Replay, Sent, TrialRules
from strata.tools.bench.capacity_search import SearchRules, most_cameras
from strata.tools.bench.capacity_standin import BOX


@dataclass(frozen=True)
class T:
    cameras: int
    carried: bool


def threshold(most: int, seen: list[int]):  # type: ignore[no-untyped-def]
    def trial(n: int) -> T:
        seen.append(n)
        return T(n, n <= most)

    return trial


@pytest.mark.parametrize("most", [1, 2, 3, 5, 8, 13, 37, 64])
def test_search_finds_the_most_with_doubling_then_bisection(most: int) -> None:
    seen: list[int] = []
    r = most_cameras(threshold(most, seen), SearchRules(limit=128, max_trials=20))
    assert (r.most, r.stopped, r.exact) == (most, "exact", True)
    assert r.least_failed == most + 1
    # Doubling up to the first failure, then bisection: about 2 log2 trials at most.
    assert len(seen) <= 2 * int(np.ceil(np.log2(most + 1))) + 1
    assert seen[: 1 + int(np.log2(most))] == [2**k for k in range(1 + int(np.log2(most)))]


def test_search_stops_at_the_limit_as_a_lower_bound() -> None:
    seen: list[int] = []
    r = most_cameras(threshold(1000, seen), SearchRules(limit=24, max_trials=20))
    assert (r.most, r.stopped, r.exact, r.least_failed) == (24, "limit", False, None)
    assert seen == [1, 2, 4, 8, 16, 24]


def test_search_none_when_one_camera_fails() -> None:
    r = most_cameras(threshold(0, []), SearchRules())
    assert (r.most, r.stopped, r.exact, len(r.trials)) == (0, "none", True, 1)


def test_search_stops_at_max_trials_with_its_bracket() -> None:
    r = most_cameras(threshold(37, []), SearchRules(limit=128, max_trials=7))
    assert (r.stopped, len(r.trials), r.exact) == ("trials", 7, False)
    assert r.most <= 37 < r.least_failed  # type: ignore[operator]


def test_search_stops_on_its_time_budget_before_a_trial() -> None:
    now = [0.0]

    def trial(n: int) -> T:
        now[0] += 10.0  # each trial takes 10 s
        return T(n, n <= 37)

    r = most_cameras(trial, SearchRules(limit=128, max_trials=50, budget_s=35.0), lambda: now[0])
    assert (r.stopped, len(r.trials)) == ("budget", 4)


@pytest.mark.parametrize(
    ("most", "expect"),
    [
        (100, [32, 64, 128, 96, 112, 104, 100, 102, 101]),
        (20, [32, 16, 24, 20, 22, 21]),
        (0, [4, 2, 1]),
    ],
)
def test_search_doubles_from_its_start_and_bisects_below_it(most: int, expect: list[int]) -> None:
    seen: list[int] = []
    start = expect[0]
    r = most_cameras(threshold(most, seen), SearchRules(limit=128, max_trials=20, start=start))
    assert seen == expect
    assert (r.most, r.stopped) == (most, "none" if most == 0 else "exact")


def test_search_rules_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="limit"):
        SearchRules(limit=0)
    with pytest.raises(ValueError, match="start"):
        SearchRules(limit=16, start=32)
    with pytest.raises(ValueError, match="start"):
        SearchRules(start=0)


def _recording(frames: int = 20, fps: float = 10.0) -> Recording:
    """Every frame kept (a tiny JPEG-sized payload); the reference: one box everywhere."""
    msgs = []
    for i in range(frames):
        hdr = frame_pb2.FrameHeader(
            version=current_version(),
            camera_id="rec",
            sequence=i + 1,
            frame_index=i,
            width=64,
            height=128,
            encoding=common_pb2.ENCODING_JPEG,
            kind=frame_pb2.FRAME_KIND_FRAME,
            payload_size=16,
        )
        msgs.append(Sent(hdr.SerializeToString(), bytes(16), i, 0.005))
    box = FrameBoxes.of(np.array([BOX], np.float32), np.array([0], np.int32))
    return Recording("synthetic", False, fps, frames, msgs, [box] * frames, {"person": 0})


def _standin(tmp: Path, service_ms: float) -> EdgeServer:
    cmd = [
        sys.executable,
        "-m",
        "strata.tools.bench.capacity_standin",
        "--service-ms",
        str(service_ms),
        "--credits",
        "4",
    ]
    return EdgeServer(tmp, {}, command=cmd)


@pytest.mark.slow
def test_replay_under_capacity_keeps_every_frame(tmp_path: Path) -> None:
    with _standin(tmp_path, 5.0) as edge:
        t = Replay(_recording(), 2, edge.listen, edge.publish).run(TrialRules())
    assert t.carried, t
    assert (t.worst_f1, t.held_dropped, t.sent) == (1.0, 0, 40)
    assert t.p99_s < 0.5


@pytest.mark.slow
def test_search_on_a_stand_in_edge_finds_its_capacity(tmp_path: Path) -> None:
    """25 ms a frame: 40 frames/s, four 10 fps cameras. Over it, frames are held back (BUSY,
    credits), dropped at the source after `hold_s`, and the accuracy falls."""
    rec = _recording(frames=80)
    rules = TrialRules(target_f1=0.95, hold_s=0.5)
    trials = []

    def trial(n: int):  # type: ignore[no-untyped-def]
        with _standin(tmp_path / f"n{n}", 25.0) as edge:
            trials.append(Replay(rec, n, edge.listen, edge.publish).run(rules))
        return trials[-1]

    r = most_cameras(trial, SearchRules(limit=16, max_trials=8, budget_s=300))
    assert r.stopped == "exact", [(t.cameras, t.carried, t.why) for t in trials]
    assert 3 <= r.most <= 4, [(t.cameras, t.carried, t.why) for t in trials]
    over = [t for t in trials if not t.carried]
    assert over and all(t.held_dropped > 0 for t in over)
    assert len(trials) <= 8


def test_baseline_without_supervision_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from strata.tools.bench import capacity_baseline

    monkeypatch.setitem(sys.modules, "supervision", None)
    with pytest.raises(capacity_baseline.MissingSupervisionError, match="--no-deps supervision"):
        capacity_baseline.import_supervision()


def test_a_rotated_camera_renumbers_frames_and_drops_notices_across_the_wrap() -> None:
    from strata.tools.bench.capacity_replay import _Camera

    rec = _recording(frames=10)
    replay = Replay.__new__(Replay)
    replay.rec = rec
    cam = _Camera("cap001", 7, 6, None)  # type: ignore[arg-type]  # starts at clip frame 6
    capture = [1000 * p for p in range(10)]
    hdr = frame_pb2.FrameHeader(kind=frame_pb2.FRAME_KIND_SKIPPED, frame_index=7)
    for f in (4, 5, 6):  # clip frames 4, 5 are before the camera's start: across the wrap
        hdr.earlier_skipped.add(frame_index=f)
    replay._stamp(cam, hdr, replay.pidx(cam, 7), capture)
    assert (hdr.camera_id, hdr.session_id, hdr.sequence, hdr.frame_index) == ("cap001", 7, 1, 1)
    assert [(s.frame_index, s.capture_ns) for s in hdr.earlier_skipped] == [(0, 0)]
    assert replay.pidx(cam, 5) == 9 and hdr.capture_ns == 1000


def test_recorded_messages_skip_heartbeats_and_bound_the_lag() -> None:
    from strata.tools.bench.capacity_record import to_messages

    beat = frame_pb2.FrameHeader(kind=frame_pb2.FRAME_KIND_HEARTBEAT).SerializeToString()
    frame = frame_pb2.FrameHeader(frame_index=3, capture_ns=1_000_000_000).SerializeToString()
    late = frame_pb2.FrameHeader(frame_index=4, capture_ns=1).SerializeToString()
    out = to_messages([(5, beat, b""), (1_050_000_000, frame, b"x"), (10**12, late, b"y")])
    assert [(m.frame_index, round(m.lag_s, 3)) for m in out] == [(3, 0.05), (4, 2.0)]


def test_precision_takes_the_models_variant_and_says_when_it_is_missing() -> None:
    from strata.shared.models import ModelError
    from strata.tools.bench.capacity import with_variant
    from strata.tools.bench.detector import resolve

    detector = resolve()
    assert with_variant(detector, "fp32", "openvino") is detector
    # The starter ships PicoDet-S's int8-openvino variant: OpenVINO's int8 loads it.
    int8 = with_variant(detector, "int8", "openvino")
    assert int8.path.suffix == ".xml" and int8.precision == "int8"
    with pytest.raises(ModelError):
        with_variant(detector, "int8", "onnxruntime-cpu")  # no ONNX Runtime INT8 ships
    with pytest.raises(ModelError):
        with_variant(detector, "no-such-variant", "openvino")


@pytest.mark.slow
def test_replay_plays_every_camera_to_the_end_of_the_clip(tmp_path: Path) -> None:
    """The trial lasts the clip: it once ended at a heap leaf's send time, not the last."""
    with _standin(tmp_path, 1.0) as edge:
        t = Replay(_recording(frames=20), 7, edge.listen, edge.publish).run(TrialRules())
    assert (t.sent, t.held_dropped, t.worst_f1) == (140, 0, 1.0), t
    assert t.seconds >= 2.0


def test_stream_options_reach_every_trials_edge() -> None:
    """`--cpu-streams` / `--openvino-streams` set the edge's runtime; left out, the edge's
    own defaults stand (the key is absent, not a copy of today's default)."""
    import argparse

    from strata.shared.config.edge import EdgeConfig
    from strata.tools.bench.capacity import add_arguments, edge_section

    p = argparse.ArgumentParser()
    add_arguments(p)
    plain = edge_section(p.parse_args([]), {})["runtime"]
    assert "cpu_streams" not in plain and "openvino_streams" not in plain
    section = edge_section(p.parse_args(["--cpu-streams", "0", "--openvino-streams", "3"]), {})
    rt = EdgeConfig.model_validate(section).runtime
    assert (rt.cpu_streams, rt.openvino_streams) == (0, 3)


def test_a_start_past_the_limit_is_refused_with_the_options_to_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    from strata.tools.bench.capacity import _bounds, add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert _bounds(p.parse_args(["--start", "200"])) is None
    assert "start (200)" in capsys.readouterr().err
    # --quick's limit of 4 takes a larger start down with it.
    quick = _bounds(p.parse_args(["--start", "32", "--quick"]))
    assert quick is not None and (quick.start, quick.limit) == (4, 4)
    assert _bounds(p.parse_args(["--start", "32"])) == SearchRules(128, 10, 900.0, 32)
