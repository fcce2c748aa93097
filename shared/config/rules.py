"""Config of the rules on tracks (`rules:`): zones, lines, dwell, stationary, per camera.

A top-level section, not the edge's: every edge reads the one file, so whichever edge a
camera lands on (the ring, a takeover) knows its rules. Coordinates are relative to the
frame (0..1) unless the camera states `frame_size: [w, h]`, in which case they are pixels
of a frame that size; either way they survive a change of resolution (the edge scales them
to the frames it gets). docs/events.md describes the events these rules produce.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import KeyValueError, StrictModel, closest

Point = tuple[float, float]


class ZoneRule(StrictModel):
    """A polygon; a track is in it when its reference point is (after the inertia)."""

    name: str = Field(..., min_length=1, description="Zone name in events and metrics.")
    points: list[Point] = Field(
        ...,
        description="Polygon corners [x, y], in order (relative 0..1, or pixels with the "
        "camera's frame_size).",
    )
    labels: list[str] = Field(
        default_factory=list, description="Only objects with these labels; empty: every label."
    )
    min_score: float = Field(0.0, ge=0, le=1, description="Objects scoring less do not count.")
    min_area: float = Field(
        0.0,
        ge=0,
        description="Smaller boxes do not count: a fraction of the frame's area, or square "
        "pixels with the camera's frame_size.",
    )
    enter_frames: int = Field(
        1, ge=1, description="Consecutive positions inside before the track enters (inertia)."
    )
    leave_frames: int = Field(
        1, ge=1, description="Consecutive positions outside before the track leaves."
    )
    occupancy: bool = Field(True, description="Count the objects in the zone per label.")

    @field_validator("points")
    @classmethod
    def _polygon(cls, points: list[Point]) -> list[Point]:
        if len(points) < 3:
            raise ValueError(f"a zone's polygon needs at least 3 points, got {len(points)}")
        from shapely import Polygon, is_valid_reason  # only when a zone is configured

        poly = Polygon(points)
        if not poly.is_valid:
            raise ValueError(
                f"the polygon is not simple (it crosses itself or has no area: "
                f"{is_valid_reason(poly)}); list its corners in order around it"
            )
        return points


class LineRule(StrictModel):
    """A directional line segment; crossings each way are counted apart."""

    name: str = Field(..., min_length=1, description="Line name in events and metrics.")
    points: list[Point] = Field(
        ...,
        description="The two ends [[x1, y1], [x2, y2]] (relative 0..1, or pixels with the "
        "camera's frame_size).",
    )
    in_side: Literal["left", "right"] = Field(
        "left",
        description="Which side is 'in', looking from the first point to the second (image "
        "coordinates, y down): crossing towards it is direction `in`, away is `out`.",
    )
    labels: list[str] = Field(
        default_factory=list, description="Only objects with these labels; empty: every label."
    )
    min_score: float = Field(0.0, ge=0, le=1, description="Objects scoring less do not count.")
    debounce_s: float = Field(
        0.3,
        ge=0,
        description="A crossing counts once the track has stayed on the new side this long "
        "(capture time); crossing back sooner cancels it (jitter around the line).",
    )

    @field_validator("points")
    @classmethod
    def _segment(cls, points: list[Point]) -> list[Point]:
        if len(points) != 2:
            raise ValueError(f"a line needs exactly 2 points, got {len(points)}")
        if points[0] == points[1]:
            raise ValueError(f"the line has zero length (both ends at {list(points[0])})")
        return points


class DwellRule(StrictModel):
    """An event when a track stays in a zone longer than `seconds` (one per visit)."""

    name: str = Field(..., min_length=1, description="Rule name in events and metrics.")
    zone: str = Field(..., min_length=1, description="The zone (a name in this camera's zones).")
    seconds: float = Field(
        60.0, gt=0, description="Time in the zone (capture time) before it fires."
    )
    labels: list[str] = Field(
        default_factory=list, description="Only objects with these labels; empty: every label."
    )


class StationaryRule(StrictModel):
    """A track that moves less than `max_movement` for `seconds` is stationary: no updates
    and no cloud looks until it moves again."""

    enabled: bool = Field(True, description="Detect stationary objects.")
    name: str = Field("stationary", min_length=1, description="Rule name in events.")
    max_movement: float = Field(
        0.1, gt=0, description="Largest movement of the reference point that still counts as still."
    )
    relative_to: Literal["box", "frame"] = Field(
        "box",
        description="max_movement is a fraction of the box's larger side, or of the frame's.",
    )
    seconds: float = Field(10.0, gt=0, description="Still this long (capture time): stationary.")


class CameraRules(StrictModel):
    """The rules of one camera."""

    frame_size: tuple[int, int] | None = Field(
        None,
        description="[width, height]: the coordinates below are pixels of a frame this size; "
        "absent: they are relative to the frame (0..1).",
    )
    reference_point: Literal["bottom_center", "center", "top_center"] = Field(
        "bottom_center",
        description="The point of a box that rules test (bottom centre: where an object stands).",
    )
    zones: list[ZoneRule] = Field(default_factory=list, description="Polygon zones.")
    lines: list[LineRule] = Field(default_factory=list, description="Directional lines.")
    dwell: list[DwellRule] = Field(default_factory=list, description="Dwell limits per zone.")
    stationary: StationaryRule = Field(
        default_factory=StationaryRule, description="Stationary objects."
    )

    @field_validator("frame_size")
    @classmethod
    def _size(cls, size: tuple[int, int] | None) -> tuple[int, int] | None:
        if size is not None and (size[0] <= 0 or size[1] <= 0):
            raise ValueError(f"frame_size must be positive [width, height], got {list(size)}")
        return size

    @model_validator(mode="after")
    def _consistent(self) -> CameraRules:
        w, h = self.frame_size or (1, 1)
        unit = "pixels of the stated frame_size" if self.frame_size else "relative (0..1)"
        for kind, i, rule in self.rules():
            if isinstance(rule, DwellRule):
                continue
            for j, (x, y) in enumerate(rule.points):
                if not (0 <= x <= w and 0 <= y <= h):
                    raise KeyValueError(
                        (kind, i, "points", j),
                        f"[{x}, {y}] is outside the frame: coordinates are {unit}, 0..{w} x 0..{h}",
                    )
        zones = {z.name for z in self.zones}
        for i, d in enumerate(self.dwell):
            if d.zone not in zones:
                raise KeyValueError(
                    ("dwell", i, "zone"),
                    f"no zone named {d.zone!r} on this camera (zones: {sorted(zones)})",
                )
        seen: dict[str, str] = {}
        for kind, name, i in self._names():
            if name in seen:
                raise KeyValueError(
                    (kind, i, "name") if i >= 0 else (kind, "name"),
                    f"the name {name!r} is used twice on this camera ({seen[name]} and "
                    f"{kind}): rule names must be unique per camera",
                )
            seen[name] = kind
        return self

    def rules(self) -> Iterator[tuple[str, int, ZoneRule | LineRule | DwellRule]]:
        """(section, index, rule) for every zone, line and dwell rule."""
        for i, z in enumerate(self.zones):
            yield "zones", i, z
        for i, line in enumerate(self.lines):
            yield "lines", i, line
        for i, d in enumerate(self.dwell):
            yield "dwell", i, d

    def _names(self) -> Iterator[tuple[str, str, int]]:
        for kind, i, rule in self.rules():
            yield kind, rule.name, i
        if self.stationary.enabled:
            yield "stationary", self.stationary.name, -1


class RulesConfig(StrictModel):
    """Rules on tracks, per camera id; the edge serving a camera evaluates them."""

    cameras: dict[str, CameraRules] = Field(
        default_factory=dict,
        description="Rules per camera id (zones, lines, dwell, stationary); docs/events.md.",
    )
    path_points: int = Field(
        32, ge=2, le=1024, description="Recent positions an event carries in its path summary."
    )
    end_after_s: float = Field(
        10.0,
        gt=0,
        description="A track unseen this long (capture time) ends even if the tracker never "
        "said so.",
    )
    near_margin: float = Field(
        0.03,
        ge=0,
        description="A track whose next position is within this (fraction of the frame) of a "
        "line or a zone's edge makes the edge ask for the next frames.",
    )
    near_dwell_s: float = Field(
        1.0, ge=0, description="As near_margin, for a dwell timer this close to its limit."
    )
    unseen_camera_s: float = Field(
        60.0,
        gt=0,
        description="A camera the rules name that sent no frame to this edge this long "
        "(capture time) after its first camera did is reported: an ERROR in the log and "
        "strata_edge_rules_camera_unseen{camera} 1 (a misspelt id, or a camera this edge "
        "does not serve).",
    )
    ask_budget: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Most frames the rules may ask a camera for, as a share of its source "
        "frames (a token bucket): what the cascade saves is not spent on boundaries.",
    )

    @field_validator("cameras")
    @classmethod
    def _ids(cls, cameras: dict[str, CameraRules]) -> dict[str, CameraRules]:
        for cam in cameras:
            if not cam:
                raise ValueError("a camera id must not be empty")
        return cameras

    def check_cameras(self, known: Sequence[str | None], where: str = "device.cameras") -> None:
        """Raise KeyValueError for a camera with rules that `known` (device.cameras' ids;
        None for one without an explicit id) does not list; nothing when `known` is empty."""
        if not known:
            return
        ids = {k for k in known if k}
        for cam in self.unknown_cameras(ids):
            hint = (
                "; some device.cameras have no `id`: rules need explicit camera ids"
                if len(ids) < len(known)
                else _did_you_mean(cam, ids)
            )
            raise KeyValueError(
                ("cameras", cam),
                f"rules for camera {cam!r}, which {where} does not list (ids: {sorted(ids)}){hint}",
            )

    def unknown_cameras(self, ids: Iterable[str]) -> list[str]:
        """The cameras with rules that are not among `ids`, sorted."""
        return sorted(set(self.cameras) - set(ids))

    def unseen_hint(self, camera_id: str, seen: Iterable[str]) -> str:
        """For a camera without rules that has just appeared: the rules' cameras not among
        `seen` (those met so far), with a guess when one looks like a misspelling of
        `camera_id`; "" when there is nothing to say."""
        if camera_id in self.cameras:
            return ""
        unseen = self.unknown_cameras({*seen, camera_id})
        if not unseen:
            return ""
        guess = closest(camera_id, unseen)
        return (
            f"camera {camera_id!r} has no rules, and the rules name camera(s) not seen here "
            f"yet: {', '.join(unseen)}"
            + (f"; is {guess!r} meant to be {camera_id!r}?" if guess else "")
            + " (rules apply by exact camera id)"
        )

    def check_tracked(self, tracked: Sequence[str]) -> None:
        """Raise KeyValueError for a rule naming a label that objects.track (`tracked`)
        lacks: the edge drops such a label before the rules see it, so the rule could
        never fire."""
        have = set(tracked)
        for cam, cam_rules in self.cameras.items():
            for kind, i, rule in cam_rules.rules():
                for j, label in enumerate(rule.labels):
                    if label not in have:
                        raise KeyValueError(
                            ("cameras", cam, kind, i, "labels", j),
                            f"rules.cameras.{cam}.{kind}.{i}.labels names {label!r}, which "
                            f"objects.track does not list (tracked: {', '.join(tracked)}): "
                            f"add {label!r} to objects.track, or remove it from the rule",
                        )


class UnknownLabelError(ValueError):
    """A rule names a label the detector does not have."""


def _did_you_mean(name: str, ids: Iterable[str]) -> str:
    guess = closest(name, ids)
    return f"; did you mean {guess!r}?" if guess else ""


def check_labels(rules: RulesConfig, labels: Sequence[str]) -> None:
    """Raise UnknownLabelError naming every rule label the model's `labels` lack.

    Labels depend on the model, which the config alone does not fix: the edge calls this
    once its model is loaded, before it takes a frame (nothing starts half-configured).
    """
    have = set(labels)
    bad: list[str] = []
    for cam, cam_rules in rules.cameras.items():
        for kind, i, rule in cam_rules.rules():
            bad.extend(
                f"rules.cameras.{cam}.{kind}.{i}.labels: {label!r}"
                for label in rule.labels
                if label not in have
            )
    if bad:
        raise UnknownLabelError(
            "rules name labels the detector does not have:\n  "
            + "\n  ".join(bad)
            + f"\n(the model's labels: {', '.join(sorted(have)) or 'none'})"
        )
