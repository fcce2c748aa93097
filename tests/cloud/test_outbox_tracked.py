"""The labels Home Assistant discovery announces (cloud/outbox/tracked.py): the edge's
tracked labels, resolved from the same config as the edge resolves them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strata.cloud.outbox.tracked import announced_labels
from strata.shared.config import StrataConfig, validate_model
from strata.shared.config.objects import DEFAULT_TRACK, tracked_labels
from strata.shared.models import ModelRepository


def cfg(**sections: Any) -> StrataConfig:
    return validate_model(StrataConfig, sections)


def test_a_listed_track_is_announced_as_listed() -> None:
    assert announced_labels(cfg(objects={"track": ["person", "skis"]})) == ("person", "skis")


def test_the_defaults_follow_the_detectors_labels_when_the_config_names_them() -> None:
    one = cfg(edge={"model": {"labels": ["person"]}})
    assert announced_labels(one) == ("person",)
    custom = cfg(edge={"model": {"labels": ["forklift", "pallet"]}})
    assert announced_labels(custom) == ("forklift", "pallet")


def test_the_defaults_follow_the_repository_models_labels() -> None:
    c = cfg()
    labels = ModelRepository(None).manifest(c.edge.model.name).labels
    assert announced_labels(c) == tracked_labels(c.objects, labels).labels
    assert "not_person" not in announced_labels(c)


def test_without_the_detectors_labels_the_defaults_are_announced(tmp_path: Path) -> None:
    assert announced_labels(cfg(edge={"model": {"path": str(tmp_path / "x.onnx")}})) == (
        DEFAULT_TRACK
    )
    assert announced_labels(cfg(models={"repository": str(tmp_path)})) == DEFAULT_TRACK


def test_a_listed_label_the_detector_lacks_is_still_only_the_list() -> None:
    # The edge refuses this config; the cloud announces nothing outside the list.
    c = cfg(objects={"track": ["person", "car"]}, edge={"model": {"labels": ["person"]}})
    assert announced_labels(c) == ("person", "car")
