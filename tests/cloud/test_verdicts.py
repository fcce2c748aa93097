"""The cloud's second opinion (cloud/classify/verdicts.py): confirm, reject or abstain on the
detector's label within the model's verdict map, never a new label; the starter model's map,
stored and shown beside the detector's label."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strata.cloud.classify.classifier import load_classifier
from strata.cloud.classify.verdicts import (
    VERDICTS_FILE,
    VerdictMap,
    VerdictMapFile,
    event_verdict,
    identity_map,
    load_verdict_map,
)
from strata.cloud.outbox.payload import event_json
from strata.cloud.outbox.sources import crop_event
from strata.cloud.store.event_rows import COLUMNS, insert_row
from strata.shared.config.cloud import CloudModelConfig
from strata.shared.contracts import analytics_pb2, common_pb2, events_pb2
from strata.shared.models import ModelRepository, starter_repository
from strata.shared.runtime import ModelLoadError

ROOT = Path(__file__).resolve().parents[2]
NAME = "mobilenetv2_imagenet"
CONFIRM, REJECT, ABSTAIN = (
    events_pb2.VERDICT_CONFIRM,
    events_pb2.VERDICT_REJECT,
    events_pb2.VERDICT_ABSTAIN,
)


@pytest.fixture(scope="module")
def starter() -> tuple[VerdictMap, tuple[str, ...]]:
    labels = ModelRepository().manifest(NAME).labels
    return load_verdict_map(starter_repository() / NAME, labels, NAME), labels


def probs(labels: tuple[str, ...], **mass: float) -> np.ndarray:
    """A probability row with `mass` on the named labels, the rest spread evenly."""
    p = np.zeros(len(labels), np.float32)
    for name, m in mass.items():
        p[labels.index(name.replace("_", " "))] = m
    rest = 1.0 - p.sum()
    p[p == 0] = rest / np.count_nonzero(p == 0)
    return p


def test_a_covered_label_is_confirmed_by_its_group_mass(starter: tuple) -> None:
    vm, labels = starter
    # Mass spread over several car classes confirms: the group, not one class, counts.
    j = vm.judge("car", probs(labels, minivan=0.25, cab=0.2, sports_car=0.1))
    assert j.verdict == CONFIRM and j.support == pytest.approx(0.55, abs=0.01)
    assert vm.judge("dog", probs(labels, beagle=0.5, basset=0.2)).verdict == CONFIRM


def test_an_unrelated_group_rejects_only_when_this_one_holds_little(starter: tuple) -> None:
    vm, labels = starter
    assert vm.judge("car", probs(labels, tabby=0.9)).verdict == REJECT
    # Some car mass left: not sure enough to reject.
    assert vm.judge("car", probs(labels, tabby=0.7, cab=0.2)).verdict == ABSTAIN
    # A van called car by the detector and truck by ImageNet: related, never rejected.
    assert vm.judge("car", probs(labels, moving_van=0.95)).verdict == ABSTAIN
    # Nothing covered is sure: abstain.
    assert vm.judge("car", probs(labels, microwave=0.9)).verdict == ABSTAIN


def test_person_always_abstains(starter: tuple) -> None:
    vm, labels = starter
    for crop in (probs(labels, suit=0.99), probs(labels, jersey=0.9), probs(labels, beagle=0.95)):
        j = vm.judge("person", crop)
        assert j.verdict == ABSTAIN and j.support == 0.0
    # A label the map does not cover abstains too (COCO's kite is not ImageNet's bird kite).
    assert vm.judge("frisbee", probs(labels, tabby=0.99)).verdict == ABSTAIN


def test_without_a_map_each_label_stands_for_itself() -> None:
    vm = identity_map(("not_person", "person"))
    assert vm.judge("person", np.array([0.1, 0.9], np.float32)).verdict == CONFIRM
    assert vm.judge("person", np.array([0.97, 0.03], np.float32)).verdict == REJECT
    assert vm.judge("car", np.array([0.97, 0.03], np.float32)).verdict == ABSTAIN


def test_a_bad_map_says_the_fix(tmp_path: Path) -> None:
    (tmp_path / VERDICTS_FILE).write_text("groups:\n  car: [minivan, flying carpet]\n")
    with pytest.raises(ModelLoadError, match="'flying carpet', which is not one of the model"):
        load_verdict_map(tmp_path, ("minivan", "cab"), "m")
    (tmp_path / VERDICTS_FILE).write_text("groups:\n  car: [[0, 5]]\n")
    with pytest.raises(ModelLoadError, match=r"classes 0\.\.1"):
        load_verdict_map(tmp_path, ("minivan", "cab"), "m")
    with pytest.raises(ValueError, match="reject_below"):
        VerdictMapFile(confirm=0.3, reject_below=0.4, groups={})


def test_the_starter_model_judges_real_vtest_crops() -> None:
    """PicoDet-S 416 boxes of vtest frame 0 (see the model card): the white van the detector
    calls a truck is confirmed; a person ImageNet takes for a giant schnauzer abstains."""
    import cv2

    path = ROOT / "data" / "vtest.avi"
    if not path.exists():
        pytest.skip("data/vtest.avi missing: run `python .ci/test_data.py`")
    cap = cv2.VideoCapture(str(path))
    ok, frame = cap.read()
    cap.release()
    assert ok
    clf = load_classifier(CloudModelConfig())
    try:
        assert clf.name == NAME and clf.size == 224 and len(clf.labels) == 1000
        buf = clf.new_buffer(2)
        crops = [frame[35:107, 645:731], frame[231:331, 636:691]]  # (y, x) of the boxes
        buf.fill([cv2.resize(c, (224, 224), interpolation=cv2.INTER_AREA) for c in crops])
        p = clf.run(buf, 2)
    finally:
        clf.close()
    van, person = clf.judge("truck", p[0]), clf.judge("person", p[1])
    assert van.verdict == CONFIRM and van.support > 0.8
    assert clf.top_k(p[0], 1)[0].label == "recreational vehicle"
    assert person.verdict == ABSTAIN
    # What a detector calling that person a dog would get: ImageNet agrees, which is why
    # person is never judged (the model card's "Where it abstains").
    assert clf.judge("dog", p[1]).verdict == CONFIRM


def stored_crop(verdict: int = CONFIRM) -> analytics_pb2.Event:
    return analytics_pb2.Event(
        event_id=9,
        edge_id="e",
        crop_id="c1",
        camera_id="cam",
        capture_ns=2 * 10**18,
        stored_ns=2 * 10**18,
        label="minivan",
        score=0.81,
        edge_detection=common_pb2.Detection(label="car", score=0.66),
        model_version=3,
        verdict=verdict,  # type: ignore[arg-type]
        model=NAME,
        support=0.86,
    )


def test_mqtt_and_webhook_payloads_keep_the_detectors_label() -> None:
    ev = stored_crop()
    row = insert_row(ev)
    # A row of COLUMNS (event_id first, no time_ns) and the "earlier crop" flag.
    ev_row = (ev.event_id, *row[:5], row[6], *row[7:], 0)
    assert len(ev_row) == len(COLUMNS.split(",")) + 1
    body = event_json(crop_event(ev_row))
    after = body["after"]
    assert after["label"] == "car" and after["score"] == pytest.approx(0.66)
    assert after["sub_label"] == "minivan"  # Frigate's finer label, only when confirmed
    assert after["verdict"] == {
        "result": "confirmed",
        "label": "minivan",
        "score": 0.81,
        "support": 0.86,
        "model": NAME,
        "model_version": 3,
        "text": "confirmed (minivan 0.81)",
    }
    assert body["strata"]["cloud_label"] == "minivan"
    rejected = insert_row(stored_crop(REJECT))
    after = event_json(crop_event((9, *rejected[:5], rejected[6], *rejected[7:], 0)))["after"]
    assert after["label"] == "car" and after["sub_label"] is None
    assert after["verdict"]["text"] == "rejected (minivan 0.81)"


def test_an_event_stored_before_verdicts_has_none() -> None:
    ev = stored_crop(events_pb2.VERDICT_UNSPECIFIED)
    assert event_verdict(ev) is None
    assert event_verdict(stored_crop()).text == "confirmed (minivan 0.81)"  # type: ignore[union-attr]
