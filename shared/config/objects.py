"""Which labels a site tracks, and what a detection must reach to count (top-level `objects`).

As Frigate's `objects.track` and `objects.filters`: the edge drops every detection whose
label is not tracked or that misses its label's filter, counting each drop per label; the
cloud announces (Home Assistant discovery) only the tracked labels. One list for every tier,
so what a person sees agrees from the edge to Home Assistant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import Field, model_validator

from .base import StrictModel

DEFAULT_TRACK: tuple[str, ...] = (
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "bus",
    "truck",
    "cat",
    "dog",
)


class ObjectFilter(StrictModel):
    """What a detection of one label must reach to be kept."""

    min_score: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Lowest detector score kept (PicoDet-S agrees best with a larger "
        "detector at 0.5; lower finds more and boxes more noise).",
    )
    min_area: int = Field(
        0, ge=0, description="Smallest box area kept, in the frame's pixels; 0: no limit."
    )
    max_area: int = Field(
        0, ge=0, description="Largest box area kept, in the frame's pixels; 0: no limit."
    )

    @model_validator(mode="after")
    def _areas_ordered(self) -> ObjectFilter:
        if self.max_area and self.max_area < self.min_area:
            raise ValueError("max_area must be 0 (no limit) or at least min_area")
        return self


class ObjectsConfig(StrictModel):
    """The labels tracked and their filters."""

    track: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TRACK),
        min_length=1,
        description="Labels the edge tracks and the cloud announces (Home Assistant "
        "discovery); every other label is dropped at the edge and counted "
        "(strata_edge_label_drops_total). Listed here, every label must be one of the "
        "detector's or the edge refuses to start. Left out, the defaults the detector has "
        "are tracked (a warning names those it lacks: a 1-class person model tracks "
        "person); a detector with none of them (a custom model) has all its labels "
        "tracked, and Home Assistant announces them when the cloud finds the model in "
        "models.repository.",
    )
    filters: dict[str, ObjectFilter] = Field(
        default_factory=dict,
        description="Per label: min_score, min_area, max_area; a tracked label without "
        "one gets the defaults (min_score 0.5).",
    )

    @model_validator(mode="after")
    def _filters_are_tracked(self) -> ObjectsConfig:
        if len(set(self.track)) != len(self.track):
            raise ValueError("objects.track lists a label twice")
        stray = sorted(set(self.filters) - set(self.track))
        if stray:
            raise ValueError(
                f"objects.filters names labels not in objects.track: {', '.join(stray)} "
                "(add them to objects.track, or remove their filters)"
            )
        return self

    def filter_of(self, label: str) -> ObjectFilter:
        """The filter of a tracked label (the defaults when none is given)."""
        return self.filters.get(label) or ObjectFilter()


def check_tracked(objects: ObjectsConfig, labels: Sequence[str]) -> list[str]:
    """The tracked labels the model lacks."""
    have = set(labels)
    return [label for label in objects.track if label not in have]


class UntrackableLabelError(ValueError):
    """objects.track lists a label the detector does not have."""


@dataclass(frozen=True, slots=True)
class TrackedLabels:
    """The labels tracked with a given detector, and how they were chosen."""

    labels: tuple[str, ...]
    # Default labels the detector lacks (only when objects.track was left out).
    lacking: tuple[str, ...] = ()
    # The detector has none of the defaults: every label of it is tracked.
    all_of_model: bool = False

    def note(self) -> str:
        """What a person should hear at start ("" when objects.track was met as listed)."""
        if self.all_of_model:
            return (
                f"the detector has none of objects.track's default labels: tracking all its "
                f"labels ({', '.join(self.labels)}); list the ones wanted in objects.track"
            )
        if self.lacking:
            return (
                f"the detector lacks default label(s) {', '.join(self.lacking)} of "
                f"objects.track: tracking {', '.join(self.labels)} (list them in "
                "objects.track to say so)"
            )
        return ""


def tracked_labels(objects: ObjectsConfig, labels: Sequence[str]) -> TrackedLabels:
    """The labels tracked with a detector of `labels`. Raises UntrackableLabelError when
    objects.track was listed in the config and names a label the detector lacks; the
    default list keeps the labels the detector has, or all of them when it has none."""
    lacking = check_tracked(objects, labels)
    if "track" in objects.model_fields_set:
        if lacking:
            raise UntrackableLabelError(
                f"objects.track lists label(s) the detector does not have: "
                f"{', '.join(lacking)} (the detector's labels: {', '.join(labels) or 'none'}); "
                "edit objects.track to list only labels of the detector"
            )
        return TrackedLabels(tuple(objects.track))
    kept = tuple(label for label in objects.track if label not in lacking)
    if not kept:
        return TrackedLabels(tuple(dict.fromkeys(labels)), all_of_model=True)
    return TrackedLabels(kept, tuple(lacking))


__all__ = [
    "DEFAULT_TRACK",
    "ObjectFilter",
    "ObjectsConfig",
    "TrackedLabels",
    "UntrackableLabelError",
    "check_tracked",
    "tracked_labels",
]
