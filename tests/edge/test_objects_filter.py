"""The objects section right after detection (edge/inference/objects.py): which boxes are
kept (exactly, in order), every drop counted per label and reason, the area in the source
frame's pixels, and the start-up check of objects.track against the detector's labels
(a COCO-80 detector and a 1-class person one)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from edge_testkit import MODEL_SIZE
from prometheus_client import CollectorRegistry, Counter
from strata.edge.inference.objects import ObjectsFilter
from strata.shared.config.objects import DEFAULT_TRACK, ObjectsConfig, UntrackableLabelError
from strata.shared.contracts import frame_pb2
from strata.shared.vision import COCO80, FrameBoxes


def drops_counter() -> Counter:
    return Counter("t_label_drops", "", ["label", "reason"], registry=CollectorRegistry())


def value(c: Counter, label: str, reason: str) -> float:
    return float(c.labels(label, reason)._value.get())


def header(w: int = 640, h: int = 480, sw: int = 0, sh: int = 0) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        camera_id="cam", width=w, height=h, source_width=sw, source_height=sh
    )


def objects(**cfg: object) -> ObjectsConfig:
    return ObjectsConfig.model_validate(cfg)


COCO = list(COCO80)
PERSON, CAR, SKIS, DOG = (COCO.index(n) for n in ("person", "car", "skis", "dog"))


def boxes(rows: list[tuple[float, float, float, float, float, int]]) -> FrameBoxes:
    a = np.array(rows, np.float32).reshape(-1, 6)
    return FrameBoxes.of(a[:, :4], a[:, 5].astype(np.int32), a[:, 4])


def test_untracked_labels_low_scores_and_sizes_are_dropped_and_counted() -> None:
    c = drops_counter()
    f = ObjectsFilter(
        objects(
            track=["person", "car", "dog"],
            filters={"car": {"min_score": 0.6, "min_area": 400, "max_area": 10_000}},
        ),
        COCO,
        c,
    )
    got = f(
        header(),
        boxes(
            [
                (0, 0, 10, 10, 0.90, PERSON),  # kept (default min_score 0.5, no area limit)
                (0, 0, 50, 50, 0.95, SKIS),  # untracked
                (0, 0, 30, 30, 0.55, CAR),  # score: under car's 0.6
                (0, 0, 10, 10, 0.90, CAR),  # area 100 < 400
                (0, 0, 200, 200, 0.90, CAR),  # area 40 000 > 10 000
                (5, 5, 45, 45, 0.70, CAR),  # kept: area 1600
                (0, 0, 10, 10, 0.45, PERSON),  # score: under the default 0.5
                (0, 0, 9, 9, 0.99, SKIS),  # untracked
                (1, 2, 3, 4, 0.50, DOG),  # kept: at min_score exactly
            ]
        ),
    )
    np.testing.assert_array_equal(
        got.boxes, np.array([[0, 0, 10, 10], [5, 5, 45, 45], [1, 2, 3, 4]], np.float32)
    )
    np.testing.assert_array_equal(got.scores, np.array([0.9, 0.7, 0.5], np.float32))
    np.testing.assert_array_equal(got.class_ids, np.array([PERSON, CAR, DOG], np.int32))
    assert value(c, "skis", "untracked") == 2
    assert value(c, "car", "score") == 1
    assert value(c, "car", "area") == 2
    assert value(c, "person", "score") == 1
    assert value(c, "person", "area") == 0 and value(c, "dog", "score") == 0


def test_the_area_is_in_the_source_frames_pixels() -> None:
    c = drops_counter()
    f = ObjectsFilter(
        objects(track=["person"], filters={"person": {"min_area": 1000}}), ["person"], c
    )
    b = boxes([(0, 0, 20, 20, 0.9, 0)])  # 400 payload pixels
    assert len(f(header(320, 240), b)) == 0  # no source size: 400 < 1000
    assert value(c, "person", "area") == 1
    # The payload was scaled down by 2 each way: 1600 source pixels.
    assert len(f(header(320, 240, 640, 480), b)) == 1
    assert value(c, "person", "area") == 1


def test_nothing_to_drop_gives_the_same_boxes_back() -> None:
    f = ObjectsFilter(objects(), COCO, drops_counter())
    b = boxes([(0, 0, 10, 10, 0.9, PERSON), (0, 0, 10, 10, 0.8, CAR)])
    assert f(header(), b) is b
    empty = FrameBoxes.empty()
    assert f(header(), empty) is empty


def test_without_an_objects_section_every_detection_is_kept() -> None:
    c = drops_counter()
    f = ObjectsFilter(None, COCO, c)
    b = boxes([(0, 0, 1, 1, 0.01, SKIS)])
    assert f(header(), b) is b
    assert f.tracked is None


def test_a_class_id_outside_the_labels_is_dropped_as_unknown() -> None:
    c = drops_counter()
    f = ObjectsFilter(objects(track=["person"]), ["person"], c)
    got = f(header(), boxes([(0, 0, 10, 10, 0.9, 0), (0, 0, 10, 10, 0.9, 7)]))
    np.testing.assert_array_equal(got.class_ids, [0])
    assert value(c, "unknown", "untracked") == 1


def test_drops_are_logged_once_a_label_and_reason_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    f = ObjectsFilter(objects(track=["person"]), COCO, drops_counter())
    caplog.set_level(logging.INFO, "strata.edge.inference.objects")
    for _ in range(5):
        f(header(), boxes([(0, 0, 10, 10, 0.9, SKIS), (0, 0, 10, 10, 0.9, CAR)]))
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert sorted(lines) == [
        "camera cam: dropped 1 car detection(s) (untracked; objects.track, objects.filters)",
        "camera cam: dropped 1 skis detection(s) (untracked; objects.track, objects.filters)",
    ]


# ---- objects.track against the detector's labels ------------------------------------------


def test_a_listed_label_the_detector_lacks_refuses_with_the_fix() -> None:
    with pytest.raises(UntrackableLabelError) as e:
        ObjectsFilter(objects(track=["person", "forklift"]), COCO, drops_counter())
    msg = str(e.value)
    assert "forklift" in msg and "person, bicycle, car" in msg  # the model's labels
    assert "edit objects.track" in msg
    with pytest.raises(UntrackableLabelError, match="car"):
        ObjectsFilter(objects(track=["person", "car"]), ["person"], drops_counter())


def test_the_defaults_on_a_coco_detector_track_the_defaults() -> None:
    f = ObjectsFilter(objects(), COCO, drops_counter())
    assert f.tracked is not None and f.tracked.labels == DEFAULT_TRACK
    assert f.tracked.note() == ""


def test_the_defaults_on_a_one_class_person_detector_track_person_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "strata.edge.inference.objects")
    c = drops_counter()
    f = ObjectsFilter(ObjectsConfig(), ["person"], c)
    assert f.tracked is not None and f.tracked.labels == ("person",)
    assert f.tracked.lacking == tuple(x for x in DEFAULT_TRACK if x != "person")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("lacks default label(s) bicycle" in w and "tracking person" in w for w in warned)
    b = boxes([(0, 0, 10, 10, 0.6, 0), (0, 0, 10, 10, 0.3, 0)])
    np.testing.assert_array_equal(f(header(), b).scores, np.array([0.6], np.float32))


def test_the_defaults_on_a_detector_without_any_of_them_track_all_its_labels() -> None:
    f = ObjectsFilter(objects(), ["forklift", "pallet"], drops_counter())
    assert f.tracked is not None and f.tracked.all_of_model
    assert f.tracked.labels == ("forklift", "pallet")
    assert "objects.track" in f.tracked.note()
    b = boxes([(0, 0, 10, 10, 0.6, 0), (0, 0, 10, 10, 0.7, 1)])
    assert len(f(header(), b)) == 2


def test_a_min_score_under_the_detectors_threshold_is_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "strata.edge.inference.objects")
    cfg = objects(track=["person", "car"], filters={"car": {"min_score": 0.2}})
    ObjectsFilter(cfg, COCO, drops_counter(), score_threshold=0.25)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "car (0.2)" in warned and "person" not in warned
    assert "edge.detection.score_threshold" in warned


# ---- `strata edge` as a process ------------------------------------------------------------

STRATA = [sys.executable, "-m", "strata.tools.cli"]
LOOPBACK = "tcp://127.0.0.1:0"


def test_strata_edge_refuses_a_tracked_label_its_detector_lacks(
    colour_model: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        f"objects:\n  track: [person, dog]\nedge:\n  model:\n    path: {colour_model}\n"
        f"    input_size: {MODEL_SIZE}\n"
    )
    out = subprocess.run(
        [*STRATA, "edge", "--listen", LOOPBACK, "--publish", LOOPBACK, "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "objects.track lists label(s) the detector does not have: dog" in out.stderr
    assert "person, car, bicycle" in out.stderr and "edit objects.track" in out.stderr


class RulesNode:
    """What reload() calls on a node."""

    def __init__(self) -> None:
        self.rules: list[object] = []

    def request_model_check(self) -> None:
        pass

    def reconfigure_rules(self, rules: object) -> None:
        self.rules.append(rules)


def test_sighup_refuses_rules_on_labels_the_running_node_does_not_track(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from strata.edge.cli import reload

    started = objects(track=["person"])
    cfg = tmp_path / "strata.yaml"
    rule = "rules:\n  cameras:\n    cam:\n      lines:\n        - {name: d, points: [[0, 0], [1, 1]], labels: [LABEL]}\n"  # noqa: E501
    node = RulesNode()
    caplog.set_level(logging.INFO, "strata.edge.cli")
    cfg.write_text("objects:\n  track: [person, car]\n" + rule.replace("LABEL", "car"))
    reload(node, str(cfg), {}, started)  # type: ignore[arg-type]
    assert node.rules == []
    text = caplog.text
    assert "the objects section changed: it takes effect on a restart" in text
    assert "new rules refused" in text and "names 'car', which objects.track" in text
    cfg.write_text("objects:\n  track: [person]\n" + rule.replace("LABEL", "person"))
    reload(node, str(cfg), {}, started)  # type: ignore[arg-type]
    assert len(node.rules) == 1
