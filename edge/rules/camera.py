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

A frame costs a fixed number of numpy calls (at a few tracks the cost is their count,
not their size), so work that cannot change anything is skipped whole: the pending
crossings when no track has one, dwell and stationary before the earliest time either can
fire (`_dwell_due`, `_still_due`, lower bounds kept conservative), the update check when
no label differs from the one last said; and when the frame's rows are consecutive the
blocks are views, so nothing is gathered or scattered back. Every skip leaves the outputs
as they were without it (tests/edge/test_rules_golden.py). Only a Python loop over what
FIRED (rare) builds events.

A track that is not yet confirmed evolves the same state, but its results wait
(`deferred`) and go out after its `new` event when it is confirmed; one that never is
leaves nothing but a count. Invariant per (track, line): the track's actual side is the
pending side when one is pending, else the counted side.

The engine's events are built in camera_events.py, the other stages' questions answered in
camera_questions.py; both are halves of `CameraEngine` over its state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from strata.shared.config.rules import CameraRules
from strata.shared.contracts import events_pb2

from . import events as ev
from .camera_events import CameraEvents
from .camera_questions import CameraQuestions
from .camera_types import NS, CameraCounts, EngineSettings
from .compiled import CompiledRules
from .events import Fired
from .frame import TrackFrame
from .geometry import reference_matrix
from .table import (
    ANCHOR_NS,
    AX,
    AY,
    BOX,
    COUNT,
    L_PEND,
    L_PEND_NS,
    L_PEND_OBS,
    L_SIDE,
    LABEL,
    LAST,
    LIVE,
    OBS,
    PATH_N,
    POS_OBS,
    REPORTED,
    SAID,
    SCORE,
    STILL,
    TOP,
    VX,
    VY,
    Z_ENTER_NS,
    Z_IN,
    Z_RAW,
    Z_RUN,
    Z_RUN_NS,
    Z_RUN_OBS,
    Dims,
    TrackTable,
    X,
    Y,
)

log = logging.getLogger(__name__)

_NEVER = np.iinfo(np.int64).max
_NO_ROWS = np.zeros(0, np.intp)


class CameraEngine(CameraEvents, CameraQuestions):
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
        self._ref_size = (0, 0)
        self._ends_due = 0
        self._ref_matrix = np.zeros((4, 2))
        self._ref_size_px = np.zeros(2)
        # Work a frame can skip, kept conservative (a restore starts them over): a track
        # may have a pending crossing; no visit reaches its dwell limit before
        # `_dwell_due`, no moving track its stationary time before `_still_due`.
        self._pending = True
        self._dwell_due = 0
        self._still_due = 0
        self._still_ns = int(rules.stationary.seconds * NS)
        # The frame's rows as an index into the table's blocks (`TrackTable.index`): with
        # a slice the blocks the frame works on are views, written in place.
        self._ix: slice | np.ndarray = slice(0, 0)
        self._views = False
        r = self.rules
        self.table = TrackTable(Dims(r.n_lines, r.n_zones, r.n_dwell, settings.path_points))

    @property
    def _names(self) -> tuple[tuple[str, ...], ...]:
        r = self.rules
        return (r.line_names, r.zone_names, r.dwell_names)

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
        fired: list[tuple[int, Fired]] = []
        rows = newly = _NO_ROWS
        relabelled = False
        if len(f):
            rows, newly, relabelled = self._evaluate(f, fired)
        if self.rules.n_dwell and now >= self._dwell_due:
            self._dwell_unseen(rows, fired)
        out = self._emit(f, (rows, newly), fired, relabelled)
        out += self._ends(f)
        return out

    def _evaluate(
        self, f: TrackFrame, fired: list[tuple[int, Fired]]
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """Every rule over a frame with tracks: (rows, rows newly confirmed, whether a
        label may need an update); what fired goes into `fired`."""
        tb, r, now = self.table, self.rules, f.capture_ns
        if f.frame_size != self._ref_size:
            self._ref_size = f.frame_size
            self._ref_size_px = np.asarray(f.frame_size, np.float64)
            self._ref_matrix = reference_matrix(f.frame_size, r.reference)
        pts = f.boxes @ self._ref_matrix
        rows = tb.rows_of(f.track_ids)
        fresh = rows < 0
        first = bool(np.count_nonzero(fresh))
        if first:
            rows[fresh] = new = tb.admit(f.track_ids[fresh], now, pts[fresh])
            self._ends_due = min(self._ends_due, now + self.settings.end_after_ns)
            self._still_due = min(self._still_due, now + self._still_ns)
            if r.n_lines:
                tb.lines[new, :, L_SIDE] = r.lines.side(pts[fresh])
        ix = self._ix = tb.index(rows)
        self._views = isinstance(ix, slice)
        fr, ir = tb.F[ix], tb.I[ix]
        obs = f.observed.astype(bool, copy=False)
        relabelled = self._observe(f, rows, (fr, ir), obs)
        cls = ir[:, LABEL]  # every track has a label (a class id) after `_observe`
        due = self._lines(rows, (fr, ir), (pts, obs), cls, now) if r.n_lines else None
        zones = None
        if r.n_zones:
            zones = self._zones(f, rows, (fr, ir), (pts, obs, cls), fired)
        # Move on: velocity, position, path.
        dt = now - ir[:, LAST]
        if dt.min() > 0:  # every track's last position is older: all steps count
            fr[:, VX : VY + 1] = (pts - fr[:, X : Y + 1]) / dt[:, None]
        else:
            step = (pts - fr[:, X : Y + 1]) / np.maximum(dt, 1)[:, None]
            np.copyto(fr[:, VX : VY + 1], step, where=(dt > 0)[:, None])
        fr[:, X : Y + 1] = pts
        ir[:, POS_OBS] = obs
        ir[:, LAST] = now
        at = ir[:, PATH_N] % self.settings.path_points
        tb.path_xy[rows, at] = pts
        tb.path_t[rows, at] = now
        tb.path_obs[rows, at] = obs
        ir[:, PATH_N] += 1
        confirmed = f.confirmed.astype(bool, copy=False)
        reported = ir[:, REPORTED] != 0
        if zones is not None and r.n_dwell and now >= self._dwell_due:
            self._dwell((rows, self._ix), (zones, ir), (cls, confirmed | reported), fired)
        if r.cfg.stationary.enabled:
            self._stationary(f, rows, (fr, ir), pts, fired)
        if not self._views:
            tb.F[rows], tb.I[rows] = fr, ir
        if self._still_due < 0:
            self._still_due = self._next_still()
        if due is not None and np.count_nonzero(due):
            for i, k in zip(*np.nonzero(due), strict=True):
                self._commit(int(rows[i]), int(k), fired)
        newly = rows[:0] if np.count_nonzero(reported) == len(rows) else rows[confirmed & ~reported]
        return rows, newly, relabelled

    def _observe(
        self,
        f: TrackFrame,
        rows: np.ndarray,
        fi: tuple[np.ndarray, np.ndarray],
        obs: np.ndarray,
    ) -> bool:
        """Count, score and box of each track, and the label votes; whether any label
        may have changed."""
        fr, ir = fi
        ir[:, COUNT] += 1
        ir[:, OBS] += obs
        fr[:, SCORE] = f.scores
        fr[:, BOX : BOX + 4] = f.boxes
        # Only detections vote (and make the top score): a predicted box repeats the
        # tracker's class, so a frame without one changes no label (but a track's first
        # frame sets its label).
        if not (np.count_nonzero(obs) or np.count_nonzero(ir[:, LABEL] < 0)):
            return False
        voted = f.scores * obs
        fr[:, TOP] = np.maximum(fr[:, TOP], voted)
        cls = np.maximum(f.class_ids, 0)
        tb = self.table
        tb.classes(int(cls.max()) + 1)
        # Each track at most once a frame: a plain fancy-index add.
        tb.votes[rows, cls] += voted
        label = ir[:, LABEL] = np.argmax(tb.votes[self._ix], axis=1)
        # An update goes out only where the label differs from the one last said, and an
        # event this frame only sets the said label to the label: none differ, none will.
        return bool(np.count_nonzero(ir[:, SAID] != label))

    def _label_masks(self) -> tuple[np.ndarray, ...]:
        """(classes, rules): does a class pass each line's, zone's and dwell rule's
        filter; index with a frame's labels (`np.maximum(label, 0)`) where needed."""
        n_classes = self.table.votes.shape[1]
        cache = self._label_cache
        labels = self._labels
        # The model's label tuple is normally the same object every frame; an equal copy
        # costs a comparison, not a rebuild.
        if (
            cache is None
            or cache[1] != n_classes
            or (cache[0] is not labels and tuple(cache[0]) != tuple(labels))
        ):
            r = self.rules
            masks = tuple(
                flt.mask(self._labels, n_classes)
                for flt in (r.line_labels, r.zone_labels, r.dwell_labels)
            )
            cache = (self._labels, n_classes, masks)
            self._label_cache = cache
        return cache[2]

    def _lines(
        self,
        rows: np.ndarray,
        fi: tuple[np.ndarray, np.ndarray],
        step: tuple[np.ndarray, np.ndarray],
        cls: np.ndarray,
        now: int,
    ) -> np.ndarray | None:
        """Update every (track, line) state for the step to `pts`; the pending crossings
        now due (rows index x line) for `_commit`, None when there are none."""
        (fr, ir), (pts, obs) = fi, step
        r, tb = self.rules, self.table
        p0 = fr[:, X : Y + 1]
        right = r.lines.right_of(p0, pts)
        n = right.shape[0] // 2
        if np.count_nonzero(right[:n] != right[n:]):
            side = right * 2 - 1
            s0, s1 = side[:n], side[n:]
            st = tb.lines[self._ix]
            self._line_steps(
                st,
                (p0, pts, (s0, s1)),
                self._label_masks()[0][cls] & (fr[:, TOP, None] >= r.line_min_score[None, :]),
                (ir[:, POS_OBS] + obs, now),
            )
            if not self._views:
                tb.lines[rows] = st
            self._pending = True
        # Most frames no track changes side of any line: nothing to update, only the
        # pending crossings to look at, when a track has one.
        elif not self._pending:
            return None
        else:
            st = tb.lines[self._ix]
            if not np.count_nonzero(st[:, :, L_PEND]):
                live = tb.lines[tb.I[:, LIVE] != 0]
                self._pending = bool(live[:, :, L_PEND].any())
                return None
        pend = st[:, :, L_PEND]
        return np.asarray((pend != 0) & (now - st[:, :, L_PEND_NS] >= r.line_debounce_ns))

    def _line_steps(
        self,
        st: np.ndarray,
        step: tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]],
        ok: np.ndarray,
        when: tuple[np.ndarray, int],
    ) -> None:
        """The (track, line) states `st` after steps of which some changed side."""
        p0, pts, (s0, s1) = step
        obs_ends, now = when
        crossed = self.rules.lines.crossed(p0, pts, (s0, s1))
        counted, pend = st[:, :, L_SIDE], st[:, :, L_PEND]
        # The invariant: the actual side is the pending one when there is one, else the
        # counted one. A side changed round a line's end (no crossing) or by a track the
        # line does not count for moves the counted side; crossing back cancels.
        around = ~crossed & (s1 != s0)
        hit = crossed & ok
        start = hit & (pend == 0)
        np.copyto(counted, s1, where=(around & (pend == 0)) | (crossed & ~ok))
        pend[around | (crossed & ~ok) | (hit & (pend != 0))] = 0
        if np.count_nonzero(start):
            np.copyto(pend, s1, where=start)
            np.copyto(st[:, :, L_PEND_NS], now, where=start)
            np.copyto(st[:, :, L_PEND_OBS], obs_ends[:, None], where=start)

    def _zones(
        self,
        f: TrackFrame,
        rows: np.ndarray,
        fi: tuple[np.ndarray, np.ndarray],
        step: tuple[np.ndarray, np.ndarray, np.ndarray],
        fired: list[tuple[int, Fired]],
    ) -> np.ndarray:
        """Update every (track, zone) state; returns the rows' zone block (after)."""
        (fr, ir), (pts, obs, cls) = fi, step
        r, tb = self.rules, self.table
        now = f.capture_ns
        inside = r.polygons.contains(pts)
        if r.zone_label_filter:
            inside &= self._label_masks()[1][cls]
        # Filters nobody set cost nothing.
        if r.zone_score_filter:
            inside &= fr[:, TOP, None] >= r.zone_min_score[None, :]
        if r.zone_area_filter:
            w, h = f.frame_size
            b = f.boxes
            area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) / (w * h)
            inside &= area[:, None] >= r.zone_min_area[None, :]
        st = tb.zones[self._ix]
        raw = st[:, :, Z_RAW]
        # Most frames every track stays where it was and where its zones say it is: no
        # state changes (a run's length matters only while a change waits for its inertia,
        # and a new run starts at the next change of side). The flags are 0/1.
        if (
            not np.count_nonzero((inside != raw) | (st[:, :, Z_IN] != raw))
            and ir[:, COUNT].min() > 1
        ):
            return np.asarray(st)
        z_in = st[:, :, Z_IN] != 0
        raw = raw != 0
        # A run of positions on one side starts when the side changes (or at the first).
        new_run = (inside != raw) | (ir[:, COUNT] == 1)[:, None]
        o = obs[:, None].astype(np.int64)
        run = np.where(new_run, 1, st[:, :, Z_RUN] + 1)
        run_obs = np.where(new_run, o, st[:, :, Z_RUN_OBS] + o)
        run_ns = np.where(new_run, now, st[:, :, Z_RUN_NS])
        enter = ~z_in & inside & (run >= r.zone_enter)
        leave = z_in & ~inside & (run >= r.zone_leave)
        st[:, :, Z_IN] = (z_in | enter) & ~leave
        st[:, :, Z_RAW] = inside
        st[:, :, Z_RUN] = run
        st[:, :, Z_RUN_OBS] = run_obs
        st[:, :, Z_RUN_NS] = run_ns
        changed = enter | leave
        if np.count_nonzero(changed):
            np.copyto(st[:, :, Z_ENTER_NS], run_ns, where=enter)
            if r.n_dwell and np.count_nonzero(enter):  # a visit began: its limit is new
                first = int(run_ns[enter].min()) + r.min_dwell_ns
                self._dwell_due = min(self._dwell_due, first)
            if r.n_dwell:  # leaving ends the visit's dwell
                tb.dwell[self._ix] &= ~leave[:, r.dwell_zone]
            for i, k in zip(*np.nonzero(changed), strict=True):
                self._zone_event(int(rows[i]), int(k), bool(enter[i, k]), st[i, k], fired)
        if not self._views:
            tb.zones[rows] = st
        return np.asarray(st)

    def _zone_event(
        self, row: int, k: int, entered: bool, st: np.ndarray, fired: list[tuple[int, Fired]]
    ) -> None:
        name = self.rules.zone_names[k]
        if entered:
            if name not in self.table.entered[row]:
                self.table.entered[row].append(name)
            kind, dwell_s = ev.ZONE_ENTERED, 0.0
        else:
            kind, dwell_s = ev.ZONE_LEFT, max(int(st[Z_RUN_NS] - st[Z_ENTER_NS]) / NS, 0.0)
        what = Fired(
            kind,
            rule=name,
            zone=name,
            dwell_s=dwell_s,
            positions=int(st[Z_RUN]),
            observed_positions=int(st[Z_RUN_OBS]),
            at_ns=int(st[Z_RUN_NS]),
        )
        fired.append((row, what))

    def _dwell(
        self,
        rows_ix: tuple[np.ndarray, slice | np.ndarray],
        blocks: tuple[np.ndarray, np.ndarray],
        ok: tuple[np.ndarray, np.ndarray],
        fired: list[tuple[int, Fired]],
    ) -> None:
        """Dwell events of visits that just passed their limit (`rows_ix`: the rows, and
        them as an index, `TrackTable.index`); `ok`: the tracks' class ids and whether
        each is (or was) confirmed."""
        (zones, ir), r, tb = blocks, self.rules, self.table
        rows, ix = rows_ix
        zi = r.dwell_zone
        since = self.last_ns - zones[:, zi, Z_ENTER_NS]
        done = tb.dwell[ix]
        fire = (zones[:, zi, Z_IN] != 0) & (since >= r.dwell_ns) & ~done
        if not np.count_nonzero(fire):
            self._dwell_due = self._next_dwell()
            return
        # A visit past its limit may wait on its label or its confirmation: look again
        # at the next frame.
        self._dwell_due = 0
        cls, counts = ok
        fire &= self._label_masks()[2][cls] & counts[:, None]
        if not np.count_nonzero(fire):
            return
        tb.dwell[ix] = done | fire
        for i, k in zip(*np.nonzero(fire), strict=True):
            row = int(rows[i])
            what = Fired(
                ev.DWELL_EXCEEDED,
                rule=r.dwell_names[k],
                zone=r.zone_names[int(zi[k])],
                dwell_s=int(since[i, k]) / NS,
                observed_positions=int(ir[i, POS_OBS]),
                at_ns=self.last_ns,
            )
            fired.append((row, what))

    def _next_dwell(self) -> int:
        """The earliest capture time at which a visit not yet past its dwell limit
        reaches it, over every live track (one absent from a frame keeps its visit)."""
        tb, r = self.table, self.rules
        z = tb.zones[:, r.dwell_zone]
        wait = (z[:, :, Z_IN] != 0) & ~tb.dwell & (tb.I[:, LIVE] != 0)[:, None]
        if not wait.any():
            return _NEVER
        return int((z[:, :, Z_ENTER_NS] + r.dwell_ns)[wait].min())

    def _next_still(self) -> int:
        """The earliest capture time at which a live moving track, if it stays within
        `max_movement` of its anchor, becomes stationary."""
        i = self.table.I
        moving = (i[:, LIVE] != 0) & (i[:, STILL] == 0)
        if not moving.any():
            return _NEVER
        return int(i[moving, ANCHOR_NS].min()) + self._still_ns

    def _dwell_unseen(self, rows: np.ndarray, fired: list[tuple[int, Fired]]) -> None:
        """Dwell runs on the clock: a reported track in its zone that this frame lacks (the
        detector missed it, or its look was skipped; it has not ended) passes its limit
        now, not when it is next seen."""
        tb, r = self.table, self.rules
        waiting = (tb.zones[:, r.dwell_zone, Z_IN] != 0) & ~tb.dwell
        waiting[rows] = False
        waiting &= ((tb.I[:, LIVE] != 0) & (tb.I[:, REPORTED] != 0))[:, None]
        if not np.count_nonzero(waiting):
            return
        other = np.flatnonzero(waiting.any(axis=1))
        ir = tb.I[other]
        cls = np.maximum(ir[:, LABEL], 0)
        self._dwell((other, other), (tb.zones[other], ir), (cls, ir[:, REPORTED] != 0), fired)

    def _stationary(
        self,
        f: TrackFrame,
        rows: np.ndarray,
        fi: tuple[np.ndarray, np.ndarray],
        pts: np.ndarray,
        fired: list[tuple[int, Fired]],
    ) -> None:
        fr, ir = fi
        cfg = self.rules.cfg.stationary
        now = f.capture_ns
        w, h = f.frame_size
        d = (pts - fr[:, AX : AY + 1]) * self._ref_size_px
        if cfg.relative_to == "box":
            b = f.boxes
            size = (b[:, 2:] - b[:, :2]).max(axis=1)
        else:
            size = np.float64(max(w, h))
        went = np.hypot(d[:, 0], d[:, 1]) > cfg.max_movement * size
        moved = bool(np.count_nonzero(went))
        # Before `_still_due` no moving track has been still long enough: nothing stops.
        if now < self._still_due and not moved:
            return
        still = ir[:, STILL] != 0
        if moved:
            np.copyto(fr[:, AX : AY + 1], pts, where=went[:, None])
            np.copyto(ir[:, ANCHOR_NS], now, where=went)
        starts = went & still
        flips = starts
        stops = None
        if now >= self._still_due:
            stops = ~went & ~still & (now - ir[:, ANCHOR_NS] >= self._still_ns)
            flips = stops | starts
            # Worked out again after this frame's rows are written back.
            self._still_due = -1
        if not np.count_nonzero(flips):
            return
        if np.count_nonzero(starts):  # moving again: still at the earliest `seconds` from now
            self._still_due = min(self._still_due, now + self._still_ns)
        ir[:, STILL] = still ^ flips
        for i in np.flatnonzero(flips).tolist():
            kind = ev.STATIONARY if stops is not None and stops[i] else ev.ACTIVE
            fired.append((int(rows[i]), Fired(kind, rule=cfg.name, at_ns=now)))

    # ---- checkpoint ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: live tracks (their rule state by rule name), the camera
        sequence and the counts."""
        tb = self.table
        return {
            "format": 1,
            "sequence": self.sequence,
            "last_ns": self.last_ns,
            "frame_size": list(self.frame_size),
            "labels": list(self._labels),
            "counts": self.counts.to_json(),
            "tracks": [tb.track_json(row, self._names) for row in tb.live_rows().tolist()],
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Take over a snapshot's state (this camera's, possibly from another edge or an
        older rule set: rules unknown here are dropped, new ones start clean). Raises
        ValueError, KeyError or TypeError on a malformed snapshot, changing nothing."""
        if data.get("format") != 1:
            raise ValueError(f"rules checkpoint format {data.get('format')!r}: expected 1")
        fresh = CameraEngine(self.camera_id, self.rules.cfg, self.settings, int(data["sequence"]))
        fresh._load(data)
        self.__dict__.update(fresh.__dict__)

    def _load(self, data: dict[str, Any]) -> None:
        r, tb = self.rules, self.table
        self.last_ns = int(data["last_ns"])
        w, h = data.get("frame_size", [0, 0])
        self.frame_size = (int(w), int(h))
        self._labels = tuple(str(x) for x in data.get("labels", []))
        self.counts = CameraCounts.from_json(data.get("counts", {}))
        tracks = data["tracks"]
        if len(tracks) > tb.cap:
            tb.grow(len(tracks))
        for row, t in enumerate(tracks):
            tb.load_track(row, t, self._names)
            # A line new since the snapshot: its counted side is where the track is.
            known = np.array([n in t.get("lines", {}) for n in r.line_names], bool)
            if not known.all():
                here = r.lines.side(tb.F[row : row + 1, X : Y + 1])[0]
                tb.lines[row, ~known, L_SIDE] = here[~known]
        tb.reindex()
