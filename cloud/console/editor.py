"""The rule editor's model: a camera's frame (its latest snapshot, in the camera's own pixels)
and its configured rules restated in those pixels.

The editor never writes the config (the YAML stays the one source of truth): the page draws
zones and lines over the snapshot and prints the camera's whole `rules.cameras.<id>` entry,
the rules it has plus the ones drawn, with `frame_size` set to the frame, which
shared/config/rules.py validates as it stands (static/editor.js builds the text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from strata.shared.config.rules import CameraRules
from strata.shared.contracts import events_pb2

from .views import Shape, rule_shapes

DEFAULT_SIZE = (640, 480)  # a camera that has sent no frame yet and states no frame_size


@dataclass(frozen=True, slots=True)
class Editor:
    """What the editor page shows for one camera."""

    camera: str
    width: int
    height: int
    background: str  # the latest frame snapshot's URL, or '' for a blank frame
    rules: dict[str, Any]  # the camera's rules entry in frame pixels (frame_size first)
    zones: list[Shape]  # the configured ones, drawn for reference
    lines: list[Shape]

    def rules_json(self) -> str:
        """The rules entry as the page's script reads it."""
        return json.dumps(self.rules, separators=(",", ":"))

    def as_json(self) -> dict[str, Any]:
        """The record as the API returns it."""
        return {
            "camera": self.camera,
            "frame_size": [self.width, self.height],
            "snapshot": self.background,
            "rules": self.rules,
        }


def frame_size(event: events_pb2.TrackEvent | None, rules: CameraRules | None) -> tuple[int, int]:
    """The camera's frame in pixels: what its events say, else its rules' frame_size."""
    if event is not None and event.frame_width > 0 and event.frame_height > 0:
        return int(event.frame_width), int(event.frame_height)
    if rules is not None and rules.frame_size is not None:
        return rules.frame_size
    return DEFAULT_SIZE


def _num(v: float) -> float | int:
    r = round(v, 1)
    return int(r) if r == int(r) else r


def in_pixels(rules: CameraRules | None, size: tuple[int, int]) -> dict[str, Any]:
    """A camera's rules entry restated in pixels of a `size` frame: points scaled from the
    relative (0..1) or stated frame_size coordinates, zones' min_area with them; every other
    option as configured (defaults left out)."""
    if rules is None:
        return {"frame_size": list(size)}
    data = rules.model_dump(mode="json", exclude_defaults=True)
    data.pop("frame_size", None)
    fw, fh = rules.frame_size or (1, 1)
    sx, sy = size[0] / fw, size[1] / fh
    for section in ("zones", "lines"):
        for rule in data.get(section, []):
            rule["points"] = [[_num(x * sx), _num(y * sy)] for x, y in rule["points"]]
    for zone in data.get("zones", []):
        if "min_area" in zone:
            zone["min_area"] = _num(zone["min_area"] * sx * sy)
    return {"frame_size": list(size), **data}


def editor(
    camera: str,
    event: events_pb2.TrackEvent | None,
    rules: CameraRules | None,
    background: str,
) -> Editor:
    """The editor of `camera`, whose latest snapshot is `background` (taken with `event`)."""
    w, h = frame_size(event, rules)
    zones, lines = rule_shapes(rules, w, h)
    return Editor(camera, w, h, background, in_pixels(rules, (w, h)), zones, lines)
