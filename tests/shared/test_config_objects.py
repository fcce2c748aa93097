"""The top-level `objects` section: which labels are tracked with a given detector
(objects.track listed, or left to the defaults) and the errors that say the fix."""

from __future__ import annotations

import pytest
from strata.shared.config import StrataConfig, validate_model
from strata.shared.config.objects import (
    DEFAULT_TRACK,
    ObjectsConfig,
    UntrackableLabelError,
    tracked_labels,
)
from strata.shared.vision import COCO80


def test_listed_labels_must_all_be_the_detectors() -> None:
    cfg = validate_model(StrataConfig, {"objects": {"track": ["person", "car"]}}).objects
    assert tracked_labels(cfg, COCO80).labels == ("person", "car")
    with pytest.raises(UntrackableLabelError) as e:
        tracked_labels(cfg, ["person"])
    assert str(e.value) == (
        "objects.track lists label(s) the detector does not have: car (the detector's "
        "labels: person); edit objects.track to list only labels of the detector"
    )


def test_listing_exactly_the_defaults_is_still_listing_them() -> None:
    # Written in the file, the list is the user's: a label the model lacks is an error.
    cfg = ObjectsConfig.model_validate({"track": list(DEFAULT_TRACK)})
    with pytest.raises(UntrackableLabelError, match="bicycle, car"):
        tracked_labels(cfg, ["person"])


def test_the_defaults_keep_what_the_detector_has() -> None:
    cfg = validate_model(StrataConfig, {}).objects
    coco = tracked_labels(cfg, COCO80)
    assert coco.labels == DEFAULT_TRACK and not coco.lacking and coco.note() == ""
    one = tracked_labels(cfg, ["person"])
    assert one.labels == ("person",) and "motorcycle" in one.lacking and not one.all_of_model
    assert "tracking person" in one.note()
    custom = tracked_labels(cfg, ["forklift", "pallet", "forklift"])
    assert custom.labels == ("forklift", "pallet") and custom.all_of_model
    assert "list the ones wanted in objects.track" in custom.note()


def test_filters_keep_the_defaults_list_a_default() -> None:
    # Filters alone do not make the track list the user's.
    cfg = ObjectsConfig.model_validate({"filters": {"car": {"min_score": 0.7}}})
    assert tracked_labels(cfg, ["person", "car"]).labels == ("person", "car")
    assert cfg.filter_of("car").min_score == 0.7 and cfg.filter_of("person").min_score == 0.5
