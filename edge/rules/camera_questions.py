"""What other stages ask a camera's rules engine (edge/rules/camera.py): is a track
stationary, do the next frames decide a rule, how many tracks are in each zone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .camera_types import EngineSettings, Need, bump
from .compiled import CompiledRules
from .geometry import segment_distance
from .table import LIVE, REPORTED, STILL, VX, VY, Z_ENTER_NS, Z_IN, TrackTable, X, Y


class CameraQuestions:
    """The questions half of `CameraEngine`: the state it reads is the engine's."""

    rules: CompiledRules
    settings: EngineSettings
    last_ns: int
    table: TrackTable

    if TYPE_CHECKING:

        def _label_name(self, row: int) -> str: ...  # CameraEvents'

    def is_stationary(self, track_id: int) -> bool:
        """The track is stationary now (no updates nor cloud looks until it moves)."""
        row = int(self.table.rows_of(np.array([track_id], np.int64))[0])
        return row >= 0 and bool(self.table.I[row, STILL])

    def needs_frames(self, horizon_ns: int) -> Need:
        """Whether a confirmed track's position `horizon_ns` ahead (constant velocity) comes
        within `near_margin` of a line or a zone's edge, or a dwell timer within
        `near_dwell_s` (+ the horizon) of its limit: the next frames decide a rule."""
        tb, r = self.table, self.rules
        i = tb.I
        live = np.flatnonzero((i[:, LIVE] != 0) & (i[:, REPORTED] != 0) & (i[:, STILL] == 0))
        if not live.size or not (r.n_lines or r.n_zones):
            return Need()
        pos = tb.F[live, X : Y + 1]
        nxt = pos + tb.F[live, VX : VY + 1] * horizon_ns
        margin = self.settings.near_margin
        line = zone = dwell = False
        if r.n_lines:
            crossed, _, _ = r.lines.cross(pos, nxt)
            near = segment_distance(nxt, r.lines.a, r.lines.b) <= margin
            line = bool((crossed | near).any())
        if r.n_zones:
            across = r.polygons.contains(pos) != r.polygons.contains(nxt)
            zone = bool(((r.polygons.distance(nxt) <= margin) | across).any())
        if r.n_dwell:
            zi = r.dwell_zone
            st = tb.zones[live][:, zi]
            left = r.dwell_ns - (self.last_ns - st[:, :, Z_ENTER_NS])
            soon = (left > 0) & (left <= self.settings.near_dwell_ns + horizon_ns)
            dwell = bool(((st[:, :, Z_IN] != 0) & ~tb.dwell[live] & soon).any())
        return Need(line, zone, dwell)

    def occupancy(self) -> dict[tuple[str, str], int]:
        """Confirmed tracks in each zone (with `occupancy` on), by (zone, label)."""
        tb, r = self.table, self.rules
        out: dict[tuple[str, str], int] = {}
        live = np.flatnonzero((tb.I[:, LIVE] != 0) & (tb.I[:, REPORTED] != 0))
        for k in np.flatnonzero(r.zone_occupancy).tolist():
            for row in live[tb.zones[live, k, Z_IN] != 0].tolist():
                bump(out, (r.zone_names[k], self._label_name(row)))
        return out
