"""One camera's rules engine: every live track is a row of arrays, every rule a column.

Per answered frame (`process`), in capture order, for all tracks and all rules at once:
1. the step of each track's reference point from its last position to this one is tested
   against every line (`geometry.segments_cross`): a crossing between two kept frames is
   seen even when the positions between them were predicted;
2. each line keeps, per track, the side last counted and a pending crossing that commits
   once the track has stayed on the new side `debounce_s` (crossing back cancels it), so a
   track counts once per line and direction unless it really crosses back;
3. zones: even-odd ray casting of every point against every polygon edge, then the
   inertia (frames inside to enter, outside to leave), label, score and area filters;
4. dwell: time since the visit began passing the limit, once per visit;
5. stationary: the point stayed within `max_movement` of an anchor for `seconds`;
6. label: the class with the largest summed detection score.

Only a Python loop over what FIRED (rare) builds events. A track that is not yet confirmed
evolves the same state, but its results wait (`deferred`) and go out after its `new` event
when it is confirmed; one that never is leaves nothing but a count. Invariant per
(track, line): the track's actual side is the pending side when one is pending, else the
counted side.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from strata.shared.config.rules import CameraRules, RulesConfig
from strata.shared.contracts import common_pb2, events_pb2

from . import events as ev
from .compiled import CompiledRules
from .events import EventHeader, Fired, build_event
from .frame import TrackFrame
from .geometry import reference_points, segment_distance, segments_cross, side

log = logging.getLogger(__name__)

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What every camera's engine shares (from `rules:` and the edge)."""

    edge_id: str = ""
    path_points: int = 32
    end_after_ns: int = 10 * NS
    near_margin: float = 0.03
    near_dwell_ns: int = NS

    @classmethod
    def of(cls, cfg: RulesConfig, edge_id: str) -> EngineSettings:
        """From the config section."""
        return cls(
            edge_id=edge_id,
            path_points=cfg.path_points,
            end_after_ns=int(cfg.end_after_s * NS),
            near_margin=cfg.near_margin,
            near_dwell_ns=int(cfg.near_dwell_s * NS),
        )


@dataclass(frozen=True, slots=True)
class Need:
    """Why a camera's next frames matter to its rules (all false: they do not)."""

    line: bool = False
    zone: bool = False
    dwell: bool = False

    def __bool__(self) -> bool:
        return self.line or self.zone or self.dwell


@dataclass(slots=True)
class CameraCounts:
    """Counts of one camera, by (rule, direction or "", label); events by type name."""

    crossings: dict[tuple[str, str, str], int] = field(default_factory=dict)
    entries: dict[tuple[str, str], int] = field(default_factory=dict)
    dwell: dict[tuple[str, str], int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    # Tracks that ended before they were confirmed (their results were never sent).
    unconfirmed: int = 0
    # Frames older than the last one seen (not evaluated).
    out_of_order: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON-able (the checkpoint)."""
        return {
            "crossings": [[*k, v] for k, v in self.crossings.items()],
            "entries": [[*k, v] for k, v in self.entries.items()],
            "dwell": [[*k, v] for k, v in self.dwell.items()],
            "events": self.events,
            "unconfirmed": self.unconfirmed,
            "out_of_order": self.out_of_order,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CameraCounts:
        """Inverse of to_json."""
        return cls(
            {(str(a), str(b), str(c)): int(n) for a, b, c, n in d.get("crossings", [])},
            {(str(a), str(b)): int(n) for a, b, n in d.get("entries", [])},
            {(str(a), str(b)): int(n) for a, b, n in d.get("dwell", [])},
            {str(k): int(v) for k, v in d.get("events", {}).items()},
            int(d.get("unconfirmed", 0)),
            int(d.get("out_of_order", 0)),
        )


def _bump(d: dict[Any, int], key: Any) -> None:
    d[key] = d.get(key, 0) + 1


# Per-row arrays: name -> (dtype, trailing shape kind). "L"/"Z"/"D"/"C"/"P" are the rule
# and class counts and the path length.
_COLUMNS: dict[str, tuple[Any, tuple[str | int, ...]]] = {
    "id": (np.uint64, ()),
    "live": (np.bool_, ()),
    "reported": (np.bool_, ()),
    "first_ns": (np.int64, ()),
    "last_ns": (np.int64, ()),
    "count": (np.int64, ()),
    "obs_count": (np.int64, ()),
    "tseq": (np.int64, ()),
    "pos": (np.float64, (2,)),
    "vel": (np.float64, (2,)),  # per nanosecond
    "pos_obs": (np.bool_, ()),
    "box": (np.float64, (4,)),
    "score": (np.float64, ()),
    "top": (np.float64, ()),
    "votes": (np.float64, ("C",)),
    "label": (np.int64, ()),
    # The label class the track's last event said (-1: none yet).
    "said_label": (np.int64, ()),
    "anchor": (np.float64, (2,)),
    "anchor_ns": (np.int64, ()),
    "still": (np.bool_, ()),
    "path_xy": (np.float32, ("P", 2)),
    "path_t": (np.int64, ("P",)),
    "path_obs": (np.bool_, ("P",)),
    "path_n": (np.int64, ()),
    "l_side": (np.int8, ("L",)),
    "l_pend": (np.int8, ("L",)),
    "l_pend_ns": (np.int64, ("L",)),
    "l_pend_obs": (np.int8, ("L",)),
    "z_in": (np.bool_, ("Z",)),
    "z_raw": (np.bool_, ("Z",)),
    "z_in_run": (np.int64, ("Z",)),
    "z_out_run": (np.int64, ("Z",)),
    "z_run_obs": (np.int64, ("Z",)),
    "z_run_ns": (np.int64, ("Z",)),
    "z_enter_ns": (np.int64, ("Z",)),
    "d_fired": (np.bool_, ("D",)),
}

# Per (track, rule) state as a checkpoint stores it, by rule name.
_LINE_COLS = ("l_side", "l_pend", "l_pend_ns", "l_pend_obs")
_ZONE_COLS = ("z_in", "z_raw", "z_in_run", "z_out_run", "z_run_obs", "z_run_ns", "z_enter_ns")


class CameraEngine:
    """The rules of one camera over its tracks; not thread-safe (one stage thread)."""

    def __init__(
        self, camera_id: str, rules: CameraRules, settings: EngineSettings, sequence: int
    ) -> None:
        self.camera_id = camera_id
        self.rules = CompiledRules.of(rules)
        self.settings = settings
        self.counts = CameraCounts()
        # The next event's camera sequence (docs/events.md: strictly increasing).
        self.sequence = sequence
        self.last_ns = 0
        self.frame_size = (0, 0)
        self._labels: Sequence[str] = ()
        self._label_cache: tuple[Sequence[str], int, tuple[np.ndarray, ...]] | None = None
        self._dims = {
            "L": self.rules.n_lines,
            "Z": self.rules.n_zones,
            "D": self.rules.n_dwell,
            "C": 1,
            "P": settings.path_points,
        }
        self._cap = 0
        self._a: dict[str, np.ndarray] = {}
        self._grow(16)
        # Sorted live ids and their rows, for mapping a frame's ids without a Python loop.
        self._keys = np.zeros(0, np.uint64)
        self._key_rows = np.zeros(0, np.intp)
        # Per row, Python objects touched only when something fires.
        self._entered: list[list[str]] = [[] for _ in range(self._cap)]
        self._deferred: list[list[Fired]] = [[] for _ in range(self._cap)]
        self._last_state: list[events_pb2.TrackState | None] = [None] * self._cap

    # ---- storage -------------------------------------------------------------------------

    def _shape(self, n: int, trail: tuple[str | int, ...]) -> tuple[int, ...]:
        return (n, *(self._dims[t] if isinstance(t, str) else t for t in trail))

    def _grow(self, cap: int) -> None:
        for name, (dtype, trail) in _COLUMNS.items():
            new = np.zeros(self._shape(cap, trail), dtype)
            old = self._a.get(name)
            if old is not None:
                new[tuple(slice(0, s) for s in old.shape)] = old
            self._a[name] = new
        grown = cap - self._cap
        if self._cap:
            self._entered += [[] for _ in range(grown)]
            self._deferred += [[] for _ in range(grown)]
            self._last_state += [None] * grown
        self._cap = cap

    def _classes(self, n: int) -> None:
        """Make room for class ids below n in the label votes."""
        if n > self._dims["C"]:
            self._dims["C"] = n
            votes = self._a["votes"]
            new = np.zeros((self._cap, n), np.float64)
            new[:, : votes.shape[1]] = votes
            self._a["votes"] = new

    def _reindex(self) -> None:
        rows = np.flatnonzero(self._a["live"])
        ids = self._a["id"][rows]
        order = np.argsort(ids, kind="stable")
        self._keys = ids[order]
        self._key_rows = rows[order]

    def _rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Rows of `ids` (-1: not live)."""
        if not self._keys.size:
            return np.full(ids.shape[0], -1, np.intp)
        at = np.searchsorted(self._keys, ids)
        at_c = np.minimum(at, self._keys.size - 1)
        found = self._keys[at_c] == ids
        return np.where(found, self._key_rows[at_c], -1)

    def _admit(self, f: TrackFrame, idx: np.ndarray, pts: np.ndarray) -> np.ndarray:
        """Rows for the tracks at `idx` of the frame, first seen now."""
        a = self._a
        free = np.flatnonzero(~a["live"])
        if free.size < idx.size:
            self._grow(max(self._cap * 2, self._cap + idx.size))
            free = np.flatnonzero(~self._a["live"])
            a = self._a
        rows = free[: idx.size]
        for arr in a.values():
            arr[rows] = 0
        now = f.capture_ns
        a["id"][rows] = f.track_ids[idx]
        a["live"][rows] = True
        a["first_ns"][rows] = now
        a["last_ns"][rows] = now
        a["label"][rows] = -1
        a["said_label"][rows] = -1
        a["pos"][rows] = pts
        a["anchor"][rows] = pts
        a["anchor_ns"][rows] = now
        if self.rules.n_lines:
            a["l_side"][rows] = side(pts, self.rules.line_a, self.rules.line_b)
        if self.rules.n_zones:
            a["z_run_ns"][rows] = now
        for r in rows.tolist():
            self._entered[r] = []
            self._deferred[r] = []
            self._last_state[r] = None
        self._reindex()
        return rows

    # ---- the hot path --------------------------------------------------------------------

    def process(self, f: TrackFrame) -> list[events_pb2.TrackEvent]:
        """Evaluate one answered frame; the events it causes, in order."""
        now = f.capture_ns
        if now < self.last_ns:
            self.counts.out_of_order += 1
            return []
        self.last_ns = now
        self.frame_size = f.frame_size
        self._labels = f.labels
        a = self._a
        fired: list[tuple[int, Fired]] = []
        n = len(f)
        rows = np.zeros(0, np.intp)
        if n:
            pts = reference_points(f.boxes, f.frame_size, self.rules.reference)
            rows = self._rows_of(f.track_ids)
            fresh = rows < 0
            if fresh.any():
                rows[fresh] = self._admit(f, np.flatnonzero(fresh), pts[fresh])
                a = self._a
            old = ~fresh
            observed = f.observed.astype(bool)
            self._observe(f, rows, observed)
            if self.rules.n_lines and old.any():
                self._lines(rows[old], pts[old], observed[old], now, fired)
            if self.rules.n_lines:
                self._commit_pending(rows, now, fired)
            if self.rules.n_zones:
                self._zones(f, rows, pts, observed, fired)
            self._move(f, rows, pts, observed)
            confirmed = f.confirmed.astype(bool)
            if self.rules.n_dwell:
                self._dwell(rows[confirmed | a["reported"][rows]], now, fired)
            if self.rules.cfg.stationary.enabled:
                self._stationary(f, rows, pts, fired)
            newly = rows[confirmed & ~a["reported"][rows]]
        else:
            newly = rows
        out = self._emit(f, (rows, newly), fired)
        out += self._ends(f)
        return out

    def _observe(self, f: TrackFrame, rows: np.ndarray, observed: np.ndarray) -> None:
        a = self._a
        a["count"][rows] += 1
        a["obs_count"][rows] += observed
        a["score"][rows] = f.scores
        a["top"][rows] = np.where(observed, np.maximum(a["top"][rows], f.scores), a["top"][rows])
        a["box"][rows] = f.boxes
        cls = f.class_ids.astype(np.int64)
        if cls.size:
            self._classes(int(cls.max()) + 1)
            a = self._a
            np.add.at(a["votes"], (rows, np.maximum(cls, 0)), np.where(observed, f.scores, 0.0))
            a["label"][rows] = np.argmax(a["votes"][rows], axis=1)

    def _lines(
        self,
        rows: np.ndarray,
        pts: np.ndarray,
        observed: np.ndarray,
        now: int,
        fired: list[tuple[int, Fired]],
    ) -> None:
        a, r = self._a, self.rules
        p0 = a["pos"][rows]
        crossed, s1 = segments_cross(p0, pts, r.line_a, r.line_b)
        s0 = side(p0, r.line_a, r.line_b)
        pend = a["l_pend"][rows]
        counted = a["l_side"][rows]
        # Sides changed without crossing the segment (round its end): follow silently,
        # keeping the invariant (actual side = pending if any, else counted).
        around = ~crossed & (s1 != s0)
        cancel = around & (pend != 0)
        a["l_pend"][rows] = np.where(cancel, 0, pend)
        a["l_side"][rows] = np.where(around & (pend == 0), s1, counted)
        labels_ok, _, _ = self._label_masks(rows)
        ok = labels_ok & (a["top"][rows][:, None] >= r.line_min_score[None, :])
        for i, k in zip(*np.nonzero(crossed & ok), strict=True):
            row = int(rows[i])
            if a["l_pend"][row, k]:
                a["l_pend"][row, k] = 0  # crossed back before it counted
                continue
            a["l_pend"][row, k] = s1[i, k]
            a["l_pend_ns"][row, k] = now
            a["l_pend_obs"][row, k] = int(a["pos_obs"][row]) + int(observed[i])
        # A crossing of a track the line does not count for: the side moves on silently.
        skip = crossed & ~ok
        if skip.any():
            a["l_side"][rows] = np.where(skip, s1, a["l_side"][rows])
            a["l_pend"][rows] = np.where(skip, 0, a["l_pend"][rows])

    def _commit_pending(self, rows: np.ndarray, now: int, fired: list[tuple[int, Fired]]) -> None:
        a, r = self._a, self.rules
        pend = a["l_pend"][rows]
        due = (pend != 0) & (now - a["l_pend_ns"][rows] >= r.line_debounce_ns[None, :])
        for i, k in zip(*np.nonzero(due), strict=True):
            self._commit(int(rows[i]), int(k), fired)

    def _commit(self, row: int, k: int, fired: list[tuple[int, Fired]]) -> None:
        a, r = self._a, self.rules
        s = int(a["l_pend"][row, k])
        a["l_side"][row, k] = s
        a["l_pend"][row, k] = 0
        direction = ev.IN if s == r.line_in[k] else ev.OUT
        name = r.line_names[k]
        fired.append(
            (
                row,
                Fired(
                    ev.LINE_CROSSED,
                    rule=name,
                    line=name,
                    direction=direction,
                    positions=2,
                    observed_positions=int(a["l_pend_obs"][row, k]),
                    at_ns=int(a["l_pend_ns"][row, k]),
                ),
            )
        )

    def _label_masks(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: do its label pass each line's, zone's and dwell rule's filter."""
        n_classes = self._dims["C"]
        cache = self._label_cache
        if cache is None or cache[0] is not self._labels or cache[1] != n_classes:
            r = self.rules
            masks = tuple(
                flt.mask(self._labels, n_classes)
                for flt in (r.line_labels, r.zone_labels, r.dwell_labels)
            )
            cache = (self._labels, n_classes, masks)
            self._label_cache = cache
        cls = np.maximum(self._a["label"][rows], 0)
        lm, zm, dm = cache[2]
        return lm[cls], zm[cls], dm[cls]

    def _zones(
        self,
        f: TrackFrame,
        rows: np.ndarray,
        pts: np.ndarray,
        observed: np.ndarray,
        fired: list[tuple[int, Fired]],
    ) -> None:
        a, r = self._a, self.rules
        now = f.capture_ns
        w, h = f.frame_size
        area = (f.boxes[:, 2] - f.boxes[:, 0]) * (f.boxes[:, 3] - f.boxes[:, 1]) / (w * h)
        _, labels_ok, _ = self._label_masks(rows)
        inside = (
            r.polygons.contains(pts)
            & labels_ok
            & (a["top"][rows][:, None] >= r.zone_min_score[None, :])
            & (area[:, None] >= r.zone_min_area[None, :])
        )
        raw = a["z_raw"][rows]
        fresh_run = inside != raw
        first = a["count"][rows] == 1  # its first position starts a run either way
        fresh_run |= first[:, None]
        obs = observed[:, None].astype(np.int64)
        in_run = np.where(inside, a["z_in_run"][rows] + 1, 0)
        out_run = np.where(inside, 0, a["z_out_run"][rows] + 1)
        run_obs = np.where(fresh_run, obs, a["z_run_obs"][rows] + obs)
        run_ns = np.where(fresh_run, now, a["z_run_ns"][rows])
        z_in = a["z_in"][rows]
        enter = ~z_in & (in_run >= r.zone_enter[None, :])
        leave = z_in & (out_run >= r.zone_leave[None, :])
        a["z_raw"][rows] = inside
        a["z_in_run"][rows] = in_run
        a["z_out_run"][rows] = out_run
        a["z_run_obs"][rows] = run_obs
        a["z_run_ns"][rows] = run_ns
        a["z_in"][rows] = (z_in | enter) & ~leave
        a["z_enter_ns"][rows] = np.where(enter, run_ns, a["z_enter_ns"][rows])
        # Leaving ends the visit's dwell.
        if r.n_dwell and leave.any():
            left = leave[:, r.dwell_zone]
            a["d_fired"][rows] = a["d_fired"][rows] & ~left
        for i, k in zip(*np.nonzero(enter | leave), strict=True):
            row, name = int(rows[i]), r.zone_names[k]
            if enter[i, k]:
                if name not in self._entered[row]:
                    self._entered[row].append(name)
                kind, dwell_s = ev.ZONE_ENTERED, 0.0
                run = int(in_run[i, k])
            else:
                kind = ev.ZONE_LEFT
                dwell_s = (int(run_ns[i, k]) - int(a["z_enter_ns"][row, k])) / NS
                run = int(out_run[i, k])
            fired.append(
                (
                    row,
                    Fired(
                        kind,
                        rule=name,
                        zone=name,
                        dwell_s=max(dwell_s, 0.0),
                        positions=run,
                        observed_positions=int(run_obs[i, k]),
                        at_ns=int(run_ns[i, k]),
                    ),
                )
            )

    def _move(self, f: TrackFrame, rows: np.ndarray, pts: np.ndarray, observed: np.ndarray) -> None:
        a = self._a
        now = f.capture_ns
        dt = now - a["last_ns"][rows]
        step = pts - a["pos"][rows]
        moving = dt > 0
        a["vel"][rows] = np.where(
            moving[:, None], step / np.maximum(dt, 1)[:, None], a["vel"][rows]
        )
        a["pos"][rows] = pts
        a["pos_obs"][rows] = observed
        a["last_ns"][rows] = now
        p = self.settings.path_points
        at = a["path_n"][rows] % p
        a["path_xy"][rows, at] = pts
        a["path_t"][rows, at] = now
        a["path_obs"][rows, at] = observed
        a["path_n"][rows] += 1

    def _dwell(self, rows: np.ndarray, now: int, fired: list[tuple[int, Fired]]) -> None:
        a, r = self._a, self.rules
        if not rows.size:
            return
        zi = r.dwell_zone
        in_zone = a["z_in"][rows][:, zi]
        since = now - a["z_enter_ns"][rows][:, zi]
        _, _, labels_ok = self._label_masks(rows)
        fire = in_zone & ~a["d_fired"][rows] & (since >= r.dwell_ns[None, :]) & labels_ok
        if not fire.any():
            return
        a["d_fired"][rows] = a["d_fired"][rows] | fire
        for i, k in zip(*np.nonzero(fire), strict=True):
            row, z = int(rows[i]), int(zi[k])
            fired.append(
                (
                    row,
                    Fired(
                        ev.DWELL_EXCEEDED,
                        rule=r.dwell_names[k],
                        zone=r.zone_names[z],
                        dwell_s=int(since[i, k]) / NS,
                        observed_positions=int(a["pos_obs"][row]),
                        at_ns=now,
                    ),
                )
            )

    def _stationary(
        self, f: TrackFrame, rows: np.ndarray, pts: np.ndarray, fired: list[tuple[int, Fired]]
    ) -> None:
        a = self._a
        cfg = self.rules.cfg.stationary
        now = f.capture_ns
        w, h = f.frame_size
        d = (pts - a["anchor"][rows]) * np.array([w, h], np.float64)
        moved = np.hypot(d[:, 0], d[:, 1])
        if cfg.relative_to == "box":
            size = np.maximum(f.boxes[:, 2] - f.boxes[:, 0], f.boxes[:, 3] - f.boxes[:, 1])
        else:
            size = np.full(rows.size, float(max(w, h)))
        went = moved > cfg.max_movement * size
        still = a["still"][rows]
        a["anchor"][rows] = np.where(went[:, None], pts, a["anchor"][rows])
        a["anchor_ns"][rows] = np.where(went, now, a["anchor_ns"][rows])
        stops = ~went & ~still & (now - a["anchor_ns"][rows] >= int(cfg.seconds * NS))
        starts = went & still
        a["still"][rows] = (still | stops) & ~starts
        for i in np.flatnonzero(stops | starts).tolist():
            kind = ev.STATIONARY if stops[i] else ev.ACTIVE
            fired.append((int(rows[i]), Fired(kind, rule=cfg.name, at_ns=now)))

    # ---- events --------------------------------------------------------------------------

    def _emit(
        self,
        f: TrackFrame,
        rows_newly: tuple[np.ndarray, np.ndarray],
        fired: list[tuple[int, Fired]],
    ) -> list[events_pb2.TrackEvent]:
        a = self._a
        rows, newly = rows_newly
        head = EventHeader(self.camera_id, self.settings.edge_id, f.capture_ns, f.frame_size)
        out: list[events_pb2.TrackEvent] = []
        for row in newly.tolist():
            a["reported"][row] = True
            out.append(self._event(head, row, self._now(ev.NEW, row)))
            out += [self._event(head, row, d) for d in self._deferred[row]]
            self._deferred[row] = []
        for row, what in fired:
            if a["reported"][row]:
                out.append(self._event(head, row, what))
            elif what.kind in (ev.LINE_CROSSED, ev.ZONE_ENTERED, ev.ZONE_LEFT):
                self._deferred[row].append(what)
        # A new label is an update (unless the track is stationary or an event this frame
        # already carried it).
        said = a["said_label"][rows]
        changed = (said >= 0) & (said != a["label"][rows]) & a["reported"][rows] & ~a["still"][rows]
        for row in rows[changed].tolist():
            out.append(self._event(head, row, self._now(ev.UPDATE, row)))
        return out

    def _now(self, kind: int, row: int) -> Fired:
        """A lifecycle result resting on the track's current position."""
        return Fired(kind, observed_positions=int(self._a["pos_obs"][row]), at_ns=self.last_ns)

    def _event(
        self, head: EventHeader, row: int, what: Fired, end: bool = False
    ) -> events_pb2.TrackEvent:
        a = self._a
        state = self._state(row, end)
        uid = ev.track_uid(int(a["first_ns"][row]), int(a["id"][row]))
        ids = (int(a["id"][row]), uid, self.sequence, int(a["tseq"][row]))
        out = build_event(head, what, ids, (self._last_state[row], state), self._path(row))
        self.sequence += 1
        a["tseq"][row] += 1
        self._last_state[row] = state
        a["said_label"][row] = a["label"][row]
        self._count(row, what)
        return out

    def _label_name(self, row: int) -> str:
        cls = int(self._a["label"][row])
        if cls < 0:
            return ""
        return self._labels[cls] if cls < len(self._labels) else str(cls)

    def _count(self, row: int, what: Fired) -> None:
        c, label = self.counts, self._label_name(row)
        _bump(c.events, ev.type_name(what.kind))
        if what.kind == ev.LINE_CROSSED:
            _bump(c.crossings, (what.line, ev.direction_name(what.direction), label))
        elif what.kind == ev.ZONE_ENTERED:
            _bump(c.entries, (what.zone, label))
        elif what.kind == ev.DWELL_EXCEEDED:
            _bump(c.dwell, (what.rule, label))

    def _state(self, row: int, end: bool) -> events_pb2.TrackState:
        a = self._a
        x1, y1, x2, y2 = (float(v) for v in a["box"][row])
        last = int(a["last_ns"][row]) / NS
        return events_pb2.TrackState(
            label=self._label_name(row),
            class_id=int(a["label"][row]),
            score=float(a["score"][row]),
            top_score=float(a["top"][row]),
            box=common_pb2.Box(x1=x1, y1=y1, x2=x2, y2=y2),
            current_zones=[
                z for z, inside in zip(self.rules.zone_names, a["z_in"][row], strict=True) if inside
            ],
            entered_zones=self._entered[row],
            stationary=bool(a["still"][row]),
            start_time=int(a["first_ns"][row]) / NS,
            end_time=last if end else 0.0,
            frame_time=last,
            observed=bool(a["pos_obs"][row]),
        )

    def _path(self, row: int) -> events_pb2.TrackPath:
        a = self._a
        p = self.settings.path_points
        n_all = int(a["path_n"][row])
        n = min(n_all, p)
        path = events_pb2.TrackPath(
            first_seen_ns=int(a["first_ns"][row]),
            last_seen_ns=int(a["last_ns"][row]),
            count=int(a["count"][row]),
            observed_count=int(a["obs_count"][row]),
        )
        for j in range(n_all - n, n_all):
            k = j % p
            x, y = (float(v) for v in a["path_xy"][row, k])
            path.points.add(
                x=x, y=y, capture_ns=int(a["path_t"][row, k]), observed=bool(a["path_obs"][row, k])
            )
        return path

    def _ends(self, f: TrackFrame) -> list[events_pb2.TrackEvent]:
        a = self._a
        ended = np.zeros(self._cap, bool)
        if f.ended:
            rows = self._rows_of(np.asarray(f.ended, np.uint64))
            ended[rows[rows >= 0]] = True
        ended |= a["live"] & (f.capture_ns - a["last_ns"] > self.settings.end_after_ns)
        if not ended.any():
            return []
        head = EventHeader(self.camera_id, self.settings.edge_id, f.capture_ns, f.frame_size)
        out: list[events_pb2.TrackEvent] = []
        for row in np.flatnonzero(ended).tolist():
            out += self._end(head, row)
        self._reindex()
        return out

    def _end(self, head: EventHeader, row: int) -> list[events_pb2.TrackEvent]:
        a = self._a
        out: list[events_pb2.TrackEvent] = []
        if a["reported"][row]:
            # A crossing still in its debounce when the track ends did happen: it counts.
            fired: list[tuple[int, Fired]] = []
            for k in np.flatnonzero(a["l_pend"][row]).tolist():
                self._commit(row, k, fired)
            out += [self._event(head, row, what) for _, what in fired]
            out.append(self._event(head, row, self._now(ev.END, row), end=True))
        else:
            self.counts.unconfirmed += 1
        a["live"][row] = False
        self._entered[row] = []
        self._deferred[row] = []
        self._last_state[row] = None
        return out

    # ---- questions from other stages -----------------------------------------------------

    def is_stationary(self, track_id: int) -> bool:
        """The track is stationary now (no updates nor cloud looks until it moves)."""
        rows = self._rows_of(np.array([track_id], np.uint64))
        return bool(rows[0] >= 0 and self._a["still"][rows[0]])

    def needs_frames(self, horizon_ns: int) -> Need:
        """Whether a confirmed track's position `horizon_ns` ahead (constant velocity) comes
        within `near_margin` of a line or a zone's edge, or a dwell timer within
        `near_dwell_s` (+ the horizon) of its limit: the next frames decide a rule."""
        a, r = self._a, self.rules
        live = np.flatnonzero(a["live"] & a["reported"] & ~a["still"])
        if not live.size or not (r.n_lines or r.n_zones):
            return Need()
        pos = a["pos"][live]
        nxt = pos + a["vel"][live] * horizon_ns
        margin = self.settings.near_margin
        line = zone = dwell = False
        if r.n_lines:
            crossed, _ = segments_cross(pos, nxt, r.line_a, r.line_b)
            near = segment_distance(nxt, r.line_a, r.line_b) <= margin
            line = bool((crossed | near).any())
        if r.n_zones:
            d_now = r.polygons.distance(pos)
            d_next = r.polygons.distance(nxt)
            across = r.polygons.contains(pos) != r.polygons.contains(nxt)
            zone = bool(((d_next <= margin) | (d_now <= margin) | across).any())
        if r.n_dwell:
            zi = r.dwell_zone
            left = r.dwell_ns[None, :] - (self.last_ns - a["z_enter_ns"][live][:, zi])
            soon = (left > 0) & (left <= self.settings.near_dwell_ns + horizon_ns)
            dwell = bool((a["z_in"][live][:, zi] & ~a["d_fired"][live] & soon).any())
        return Need(line, zone, dwell)

    def occupancy(self) -> dict[tuple[str, str], int]:
        """Confirmed tracks in each zone (with `occupancy` on), by (zone, label)."""
        a, r = self._a, self.rules
        out: dict[tuple[str, str], int] = {}
        live = np.flatnonzero(a["live"] & a["reported"])
        for k in np.flatnonzero(r.zone_occupancy).tolist():
            for row in live[a["z_in"][live, k]].tolist():
                _bump(out, (r.zone_names[k], self._label_name(row)))
        return out

    # ---- checkpoint ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: live tracks (with their rule state by rule name), the camera
        sequence and the counts. Rules are matched by name on restore."""
        a, r = self._a, self.rules
        tracks = []
        for row in np.flatnonzero(a["live"]).tolist():
            t: dict[str, Any] = {
                name: a[name][row].tolist()
                for name, (_, trail) in _COLUMNS.items()
                if not any(isinstance(x, str) and x in "LZD" for x in trail)
                and name not in ("live", "votes")
            }
            votes = a["votes"][row]
            t["votes"] = {str(c): float(votes[c]) for c in np.flatnonzero(votes).tolist()}
            t["lines"] = {
                n: [int(a[c][row, k]) for c in _LINE_COLS] for k, n in enumerate(r.line_names)
            }
            t["zones"] = {
                n: [int(a[c][row, k]) for c in _ZONE_COLS] for k, n in enumerate(r.zone_names)
            }
            t["dwell"] = {n: bool(a["d_fired"][row, k]) for k, n in enumerate(r.dwell_names)}
            t["entered"] = list(self._entered[row])
            t["deferred"] = [d.to_json() for d in self._deferred[row]]
            st = self._last_state[row]
            t["last_state"] = base64.b64encode(st.SerializeToString()).decode() if st else ""
            tracks.append(t)
        return {
            "sequence": self.sequence,
            "last_ns": self.last_ns,
            "frame_size": list(self.frame_size),
            "labels": list(self._labels),
            "counts": self.counts.to_json(),
            "tracks": tracks,
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Take over a snapshot's state (this camera's, possibly from another edge or an
        older rule set: rules unknown here are dropped, new ones start clean). Raises
        ValueError, KeyError or TypeError on a malformed snapshot, changing nothing."""
        fresh = CameraEngine(self.camera_id, self.rules.cfg, self.settings, int(data["sequence"]))
        fresh._load(data)
        self.__dict__.update(fresh.__dict__)

    def _load(self, data: dict[str, Any]) -> None:
        r = self.rules
        self.last_ns = int(data["last_ns"])
        w, h = data.get("frame_size", [0, 0])
        self.frame_size = (int(w), int(h))
        self._labels = tuple(str(x) for x in data.get("labels", []))
        self.counts = CameraCounts.from_json(data.get("counts", {}))
        tracks = data["tracks"]
        if len(tracks) > self._cap:
            self._grow(len(tracks))
        a = self._a
        for row, t in enumerate(tracks):
            for name in _COLUMNS:
                if name in t and name != "votes":
                    value = np.asarray(t[name], a[name].dtype)
                    if value.shape != a[name].shape[1:]:
                        if name.startswith("path_"):
                            continue  # path_points changed: the path starts over
                        raise ValueError(f"checkpoint track column {name}: shape {value.shape}")
                    a[name][row] = value
            if np.asarray(t.get("path_t", [])).shape != a["path_t"].shape[1:]:
                a["path_n"][row] = 0
            a["live"][row] = True
            votes = {int(c): float(v) for c, v in t.get("votes", {}).items()}
            if votes:
                self._classes(max(votes) + 1)
                a = self._a
                for cls, v in votes.items():
                    a["votes"][row, cls] = v
            for k, n in enumerate(r.line_names):
                vals = t.get("lines", {}).get(n)
                if vals is None:  # a line new since the snapshot: the side of where it is
                    a["l_side"][row, k] = side(
                        a["pos"][row : row + 1], r.line_a[k : k + 1], r.line_b[k : k + 1]
                    )[0, 0]
                    continue
                for col, v in zip(_LINE_COLS, vals, strict=True):
                    a[col][row, k] = v
            for k, n in enumerate(r.zone_names):
                vals = t.get("zones", {}).get(n)
                if vals is None:
                    a["z_run_ns"][row, k] = a["last_ns"][row]
                    continue
                for col, v in zip(_ZONE_COLS, vals, strict=True):
                    a[col][row, k] = v
            for k, n in enumerate(r.dwell_names):
                a["d_fired"][row, k] = bool(t.get("dwell", {}).get(n, False))
            self._entered[row] = [str(z) for z in t.get("entered", [])]
            self._deferred[row] = [Fired.from_json(d) for d in t.get("deferred", [])]
            raw = t.get("last_state", "")
            self._last_state[row] = (
                events_pb2.TrackState.FromString(base64.b64decode(raw)) if raw else None
            )
        self._reindex()
