"""`OutboxEvent`: one stored event as every sink sees it, whatever table it came from.

A source (sources.py) turns its rows into these; sinks render them (payload.py) and filter
them (filters.py). Field names follow Frigate's `frigate/events` objects where they mean
the same (docs/events.md), so a TrackEvent maps onto them one to one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..classify.verdicts import VerdictInfo


@dataclass(frozen=True, slots=True)
class ObjectState:
    """Frigate's `before` / `after` object: a tracked object at one moment."""

    id: str
    camera: str
    label: str
    score: float
    top_score: float
    # [x1, y1, x2, y2] in source pixels; None when unknown.
    box: tuple[float, float, float, float] | None = None
    current_zones: tuple[str, ...] = ()
    entered_zones: tuple[str, ...] = ()
    stationary: bool = False
    # Seconds since the Unix epoch (Frigate's units); end_time None while the track lives.
    start_time: float = 0.0
    end_time: float | None = None
    frame_time: float = 0.0
    # A second opinion on the label (the cloud classifier's, for a track event).
    sub_label: str | None = None
    # The cloud's second opinion on `label` (None: none, or stored before verdicts were).
    verdict: VerdictInfo | None = None
    # The track has a snapshot (Frigate's has_snapshot).
    has_snapshot: bool = False


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """One event to deliver: where it is in the store, its key, and what it says."""

    # Which table (source name) and its row id there; ids increase in commit order.
    source: str
    stored_id: int
    stored_ns: int
    capture_ns: int
    # Receivers dedupe on it: the same event always has the same key, whoever sends it.
    key: str
    # new / update / end / line_crossed / zone_entered / ... (docs/events.md).
    type: str
    camera_id: str
    edge_id: str
    after: ObjectState
    before: ObjectState | None = None
    # A track's id for cooldowns ("" when untracked: no cooldown applies).
    track: str = ""
    rule: str = ""
    zone: str = ""
    line: str = ""
    direction: str = ""
    # A track lifecycle or rule event (occupancy counts follow these; a classified crop
    # says nothing about when its object leaves).
    lifecycle: bool = False
    # Ids of the track's best crop and full-frame snapshots when the event was emitted
    # (strata cloud snapshot / GetSnapshot fetch them); "" when none.
    snapshot_id: str = ""
    frame_snapshot_id: str = ""
    # Source-specific fields rendered under "strata" in the JSON (scalars only).
    extra: tuple[tuple[str, str | int | float | bool], ...] = field(default=())

    @property
    def label(self) -> str:
        """The object's label now."""
        return self.after.label

    def zones(self) -> set[str]:
        """Every zone the event concerns: the rule's, and the object's before and after."""
        out = set(self.after.current_zones) | set(self.after.entered_zones)
        if self.before is not None:
            out |= set(self.before.current_zones)
        if self.zone:
            out.add(self.zone)
        return out
