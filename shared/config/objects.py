"""Which labels a site tracks, and what a detection must reach to count (top-level `objects`).

As Frigate's `objects.track` and `objects.filters`: the edge drops every detection whose
label is not tracked or that misses its label's filter, counting each drop per label; the
cloud announces (Home Assistant discovery) only the tracked labels. One list for every tier,
so what a person sees agrees from the edge to Home Assistant.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        description="Labels the edge tracks and the cloud announces; every other label is "
        "dropped at the edge and counted (strata_edge_label_drops_total).",
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
    """The tracked labels the model lacks (the edge refuses to start on any)."""
    have = set(labels)
    return [label for label in objects.track if label not in have]


__all__ = ["DEFAULT_TRACK", "ObjectFilter", "ObjectsConfig", "check_tracked"]
