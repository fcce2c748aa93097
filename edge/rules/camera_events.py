"""The events of a camera's rules engine (edge/rules/camera.py): what fired on a frame,
new tracks' deferred results, label updates and ends, each built with the track's state
and path, counted, and numbered in the camera's sequence."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from strata.shared.contracts import common_pb2, events_pb2

from . import events as ev
from .camera_types import NS, CameraCounts, EngineSettings, bump
from .compiled import CompiledRules
from .events import EventHeader, Fired, build_event
from .frame import TrackFrame
from .table import (
    BOX,
    COUNT,
    FIRST,
    ID,
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
    TSEQ,
    Z_IN,
    TrackTable,
)

# Results of a track not yet confirmed that wait for its `new` event.
_DEFERRED = (ev.LINE_CROSSED, ev.ZONE_ENTERED, ev.ZONE_LEFT)


class CameraEvents:
    """The event half of `CameraEngine`: the state it reads and writes is the engine's."""

    camera_id: str
    rules: CompiledRules
    settings: EngineSettings
    counts: CameraCounts
    sequence: int
    last_ns: int
    table: TrackTable
    _labels: Sequence[str]
    _ends_due: int

    def _commit(self, row: int, k: int, fired: list[tuple[int, Fired]]) -> None:
        """The pending crossing of (row, line k) counts."""
        st, r = self.table.lines[row, k], self.rules
        s = int(st[L_PEND])
        st[L_SIDE], st[L_PEND] = s, 0
        name = r.line_names[k]
        what = Fired(
            ev.LINE_CROSSED,
            rule=name,
            line=name,
            direction=ev.IN if s == r.line_in[k] else ev.OUT,
            positions=2,
            observed_positions=int(st[L_PEND_OBS]),
            at_ns=int(st[L_PEND_NS]),
        )
        fired.append((row, what))

    def _emit(
        self,
        f: TrackFrame,
        rows_newly: tuple[np.ndarray, np.ndarray],
        fired: list[tuple[int, Fired]],
        relabelled: bool,
    ) -> list[events_pb2.TrackEvent]:
        """The events of one frame: new tracks' (and their deferred results), what fired,
        then an update for each reported track whose label changed (`relabelled`: the
        votes moved; otherwise only an event, a new track or a stationary flip could have
        changed what was said, and those all fire)."""
        tb = self.table
        rows, newly = rows_newly
        if not (fired or newly.size or relabelled):
            return []
        head = EventHeader(self.camera_id, self.settings.edge_id, f.capture_ns, f.frame_size)
        out: list[events_pb2.TrackEvent] = []
        for row in newly.tolist():
            tb.I[row, REPORTED] = 1
            out.append(self._event(head, row, self._now(ev.NEW, row)))
            out += [self._event(head, row, d) for d in tb.deferred[row]]
            tb.deferred[row] = []
        for row, what in fired:
            if tb.I[row, REPORTED]:
                out.append(self._event(head, row, what))
            elif what.kind in _DEFERRED:
                tb.deferred[row].append(what)
        # A new label is an update, unless the track is stationary or an event this frame
        # already said it.
        ir = tb.I[rows]
        said = ir[:, SAID]
        changed = (said >= 0) & (said != ir[:, LABEL]) & (ir[:, REPORTED] != 0)
        for row in rows[changed & (ir[:, STILL] == 0)].tolist():
            out.append(self._event(head, row, self._now(ev.UPDATE, row)))
        return out

    def _now(self, kind: int, row: int) -> Fired:
        """A lifecycle result resting on the track's current position."""
        return Fired(kind, observed_positions=int(self.table.I[row, POS_OBS]), at_ns=self.last_ns)

    def _event(
        self, head: EventHeader, row: int, what: Fired, end: bool = False
    ) -> events_pb2.TrackEvent:
        tb = self.table
        i = tb.I[row]
        state = self._state(row, end)
        uid = ev.track_uid(int(i[FIRST]), int(i[ID]))
        ids = (int(i[ID]), uid, self.sequence, int(i[TSEQ]))
        out = build_event(head, what, ids, (tb.last_state[row], state), self._path(row))
        self.sequence += 1
        i[TSEQ] += 1
        i[SAID] = i[LABEL]
        tb.last_state[row] = state
        self._count(row, what)
        return out

    def _label_name(self, row: int) -> str:
        cls = int(self.table.I[row, LABEL])
        if cls < 0:
            return ""
        return self._labels[cls] if cls < len(self._labels) else str(cls)

    def _count(self, row: int, what: Fired) -> None:
        c, label = self.counts, self._label_name(row)
        bump(c.events, ev.type_name(what.kind))
        if what.kind == ev.LINE_CROSSED:
            bump(c.crossings, (what.line, ev.direction_name(what.direction), label))
        elif what.kind == ev.ZONE_ENTERED:
            bump(c.entries, (what.zone, label))
        elif what.kind == ev.DWELL_EXCEEDED:
            bump(c.dwell, (what.rule, label))

    def _state(self, row: int, end: bool) -> events_pb2.TrackState:
        tb = self.table
        f, i = tb.F[row], tb.I[row]
        x1, y1, x2, y2 = (float(v) for v in f[BOX : BOX + 4])
        last = int(i[LAST]) / NS
        zones = tb.zones[row, :, Z_IN]
        return events_pb2.TrackState(
            label=self._label_name(row),
            class_id=int(i[LABEL]),
            score=float(f[SCORE]),
            top_score=float(f[TOP]),
            box=common_pb2.Box(x1=x1, y1=y1, x2=x2, y2=y2),
            current_zones=[
                z for z, inside in zip(self.rules.zone_names, zones, strict=True) if inside
            ],
            entered_zones=tb.entered[row],
            stationary=bool(i[STILL]),
            start_time=int(i[FIRST]) / NS,
            end_time=last if end else 0.0,
            frame_time=last,
            observed=bool(i[POS_OBS]),
        )

    def _path(self, row: int) -> events_pb2.TrackPath:
        """The track's path summary: its last `path_points` positions, oldest first."""
        tb = self.table
        p = self.settings.path_points
        i = tb.I[row]
        n_all = int(i[PATH_N])
        # The ring's slots in age order, read out in one go per column.
        at = np.arange(max(n_all - p, 0), n_all) % p
        xy, ts, seen = (a[row, at].tolist() for a in (tb.path_xy, tb.path_t, tb.path_obs))
        return events_pb2.TrackPath(
            points=[
                events_pb2.PathPoint(x=x, y=y, capture_ns=t, observed=o)
                for (x, y), t, o in zip(xy, ts, seen, strict=True)
            ],
            first_seen_ns=int(i[FIRST]),
            last_seen_ns=int(i[LAST]),
            count=int(i[COUNT]),
            observed_count=int(i[OBS]),
        )

    def _ends(self, f: TrackFrame) -> list[events_pb2.TrackEvent]:
        """End events of the tracks the tracker retired or `end_after_s` ended."""
        tb = self.table
        # No live track can time out before `_ends_due` (a track's last time only grows).
        if not f.ended and f.capture_ns <= self._ends_due:
            return []
        live = tb.I[:, LIVE] != 0
        last = np.where(live, tb.I[:, LAST], np.iinfo(np.int64).max)
        ended = f.capture_ns - last > self.settings.end_after_ns
        if f.ended:
            rows = tb.rows_of(np.asarray(f.ended, np.int64))
            ended[rows[rows >= 0]] = True
        if not np.count_nonzero(ended):
            self._ends_due = int(last.min()) + self.settings.end_after_ns
            return []
        # Worked out again at the next frame, after the rows are freed.
        self._ends_due = 0
        head = EventHeader(self.camera_id, self.settings.edge_id, f.capture_ns, f.frame_size)
        out: list[events_pb2.TrackEvent] = []
        for row in np.flatnonzero(ended).tolist():
            out += self._end(head, row)
        tb.reindex()
        return out

    def _end(self, head: EventHeader, row: int) -> list[events_pb2.TrackEvent]:
        tb = self.table
        out: list[events_pb2.TrackEvent] = []
        if tb.I[row, REPORTED]:
            # A crossing still in its debounce when the track ends did happen: it counts.
            fired: list[tuple[int, Fired]] = []
            for k in np.flatnonzero(tb.lines[row, :, L_PEND]).tolist():
                self._commit(row, k, fired)
            out += [self._event(head, row, what) for _, what in fired]
            out.append(self._event(head, row, self._now(ev.END, row), end=True))
        else:
            self.counts.unconfirmed += 1
        tb.free(row)
        return out
