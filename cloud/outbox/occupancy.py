"""Occupancy: how many objects of a label are in view, and in each zone, per camera, from
track lifecycle events (new / update / rule events set a track's label and zones; end
removes it). What MQTT publishes, retained, on <prefix>/<camera>/<label> and
<prefix>/<camera>/<zone>/<label> (Frigate's `frigate/<camera>/<object>`).

The counts live in the delivering replica's memory: a replica that takes a camera over
starts it from the events it delivers, so counts settle as its tracks end (documented).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .events import OutboxEvent


@dataclass(frozen=True, slots=True)
class Count:
    """One count to publish; zone "" is the whole camera."""

    camera: str
    zone: str
    label: str
    value: int


class Occupancy:
    """Live tracks per camera, and the counts they make."""

    def __init__(self) -> None:
        # (camera, track) -> (label, zones)
        self._tracks: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}
        self._counts: Counter[tuple[str, str, str]] = Counter()

    def apply(self, ev: OutboxEvent) -> list[Count]:
        """Take one event; the counts it changed (applying it twice changes nothing)."""
        if not ev.lifecycle or not ev.track:
            return []
        key = (ev.camera_id, ev.track)
        old = self._tracks.pop(key, None)
        new = None
        if ev.type != "end":
            new = (ev.after.label, frozenset(ev.after.current_zones))
            self._tracks[key] = new
        if old == new:
            return []
        was: dict[tuple[str, str, str], int] = {}
        for state, sign in ((old, -1), (new, 1)):
            if state is None:
                continue
            label, zones = state
            for zone in ("", *zones):
                k = (ev.camera_id, zone, label)
                was.setdefault(k, self._counts[k])
                self._counts[k] += sign
        return [
            Count(c, z, lb, self._counts[(c, z, lb)])
            for (c, z, lb), before in sorted(was.items())
            if self._counts[(c, z, lb)] != before
        ]

    def value(self, camera: str, label: str, zone: str = "") -> int:
        """The count now."""
        return self._counts[(camera, zone, label)]
