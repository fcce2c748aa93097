"""The live tracks of one camera as packed arrays: a row per track, a column per value.

Packed so that a frame gathers each block once (`F[rows]`, `I[rows]`, the per-rule blocks),
works on column views and scatters it back once: at a few tracks per camera the cost of a
frame is the number of numpy calls, not their size. Rows are reused after a track ends;
`rows_of` maps a frame's track ids to rows with one `searchsorted` over the sorted live ids.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np
from strata.shared.contracts import events_pb2

from .events import Fired

# Float columns (F).
X, Y, VX, VY, BOX, SCORE, TOP, AX, AY = 0, 1, 2, 3, 4, 8, 9, 10, 11
NF = 12
F_NAMES: dict[str, slice] = {
    "pos": slice(X, Y + 1),
    "vel": slice(VX, VY + 1),  # per nanosecond
    "box": slice(BOX, BOX + 4),
    "score": slice(SCORE, SCORE + 1),
    "top": slice(TOP, TOP + 1),
    "anchor": slice(AX, AY + 1),
}
# Integer columns (I); flags are 0/1.
I_NAMES = (
    "id",
    "live",
    "reported",  # its `new` event went out
    "first_ns",
    "last_ns",
    "count",
    "obs_count",
    "tseq",  # next track sequence
    "label",  # class with the largest summed detection score (-1: none)
    "said_label",  # the label its last event said (-1: none)
    "anchor_ns",
    "path_n",
    "pos_obs",
    "still",
)
(
    ID,
    LIVE,
    REPORTED,
    FIRST,
    LAST,
    COUNT,
    OBS,
    TSEQ,
    LABEL,
    SAID,
    ANCHOR_NS,
    PATH_N,
    POS_OBS,
    STILL,
) = range(len(I_NAMES))
NI = len(I_NAMES)
# Per (track, line): counted side (+1 right, -1 left), pending side (0: none), when the
# pending crossing happened, how many of its two ends were observed.
L_NAMES = ("side", "pend", "pend_ns", "pend_obs")
L_SIDE, L_PEND, L_PEND_NS, L_PEND_OBS = range(4)
# Per (track, zone): in it (after inertia), inside at the last position (before), length
# of the current run of positions inside (or outside), observed ones in it, when the run
# began, when the visit began.
Z_NAMES = ("in", "raw", "run", "run_obs", "run_ns", "enter_ns")
Z_IN, Z_RAW, Z_RUN, Z_RUN_OBS, Z_RUN_NS, Z_ENTER_NS = range(6)


@dataclass(frozen=True, slots=True)
class Dims:
    """How many lines, zones and dwell rules the camera has, and path points kept."""

    lines: int
    zones: int
    dwell: int
    path: int


class TrackTable:
    """Rows of live tracks (see the module docstring); the camera engine's storage."""

    def __init__(self, dims: Dims, cap: int = 16) -> None:
        self.dims = dims
        self.cap = 0
        self.F = np.zeros((0, NF), np.float64)
        self.I = np.zeros((0, NI), np.int64)
        self.votes = np.zeros((0, 1), np.float64)
        self.path_xy = np.zeros((0, dims.path, 2), np.float32)
        self.path_t = np.zeros((0, dims.path), np.int64)
        self.path_obs = np.zeros((0, dims.path), bool)
        self.lines = np.zeros((0, dims.lines, 4), np.int64)
        self.zones = np.zeros((0, dims.zones, 6), np.int64)
        self.dwell = np.zeros((0, dims.dwell), bool)
        # Python objects per row, touched only when something fires.
        self.entered: list[list[str]] = []
        self.deferred: list[list[Fired]] = []
        self.last_state: list[events_pb2.TrackState | None] = []
        self._keys = np.zeros(0, np.int64)
        self._key_rows = np.zeros(0, np.intp)
        # The last `rows_of` question (its ids' bytes) and answer: a camera's frames mostly
        # carry the same ids in the same order, frame after frame.
        self._asked = (b"", np.zeros(0, np.intp))
        self._indexed: tuple[bytes, slice | np.ndarray] = (b"", slice(0, 0))
        self.grow(cap)

    _BLOCKS = ("F", "I", "votes", "path_xy", "path_t", "path_obs", "lines", "zones", "dwell")

    def grow(self, cap: int) -> None:
        """Room for `cap` rows."""
        for name in self._BLOCKS:
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        extra = cap - self.cap
        self.entered += [[] for _ in range(extra)]
        self.deferred += [[] for _ in range(extra)]
        self.last_state += [None] * extra
        self.cap = cap

    def classes(self, n: int) -> None:
        """Room for class ids below n in the label votes."""
        if n > self.votes.shape[1]:
            new = np.zeros((self.cap, n), np.float64)
            new[:, : self.votes.shape[1]] = self.votes
            self.votes = new

    def reindex(self) -> None:
        """Rebuild the id -> row map (after tracks came or went)."""
        rows = np.flatnonzero(self.I[:, LIVE])
        ids = self.I[rows, ID]
        order = np.argsort(ids, kind="stable")
        self._keys = ids[order]
        self._key_rows = rows[order]
        self._asked = (b"", np.zeros(0, np.intp))

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the track `ids` (-1: not live)."""
        # One C call and a bytes comparison: cheaper than comparing arrays.
        key = ids.dtype.str.encode() + ids.tobytes()
        last_key, last_rows = self._asked
        if key == last_key:
            return last_rows.copy()
        ids = ids.astype(np.int64, copy=False)
        if not self._keys.size:
            return np.full(ids.shape[0], -1, np.intp)
        at = np.minimum(np.searchsorted(self._keys, ids), self._keys.size - 1)
        rows = np.where(self._keys[at] == ids, self._key_rows[at], -1)
        self._asked = (key, rows)
        return rows.copy()

    def index(self, rows: np.ndarray) -> slice | np.ndarray:
        """`rows` (distinct) as an index into the blocks: a slice when they are
        consecutive and ascending (a block indexed by it is a view: nothing to gather or
        scatter back), else `rows` itself."""
        key = rows.tobytes()
        if key == self._indexed[0]:
            return self._indexed[1]
        n = rows.shape[0]
        first = int(rows[0]) if n else 0
        ix: slice | np.ndarray = rows
        if n and int(rows[-1]) - first == n - 1 and not np.count_nonzero(np.diff(rows) != 1):
            ix = slice(first, first + n)
        self._indexed = (key, ix)
        return ix

    def admit(self, ids: np.ndarray, now: int, pts: np.ndarray) -> np.ndarray:
        """Rows for new tracks first seen at `now` at `pts`; every value zero but these."""
        free = np.flatnonzero(self.I[:, LIVE] == 0)
        if free.size < ids.size:
            self.grow(max(self.cap * 2, self.cap + ids.size))
            free = np.flatnonzero(self.I[:, LIVE] == 0)
        rows = free[: ids.size]
        for name in self._BLOCKS:
            getattr(self, name)[rows] = 0
        i = self.I
        i[rows, ID] = ids.astype(np.int64)
        i[rows, LIVE] = 1
        i[rows, FIRST] = now
        i[rows, LAST] = now
        i[rows, LABEL] = -1
        i[rows, SAID] = -1
        i[rows, ANCHOR_NS] = now
        self.F[rows, X : Y + 1] = pts
        self.F[rows, AX : AY + 1] = pts
        self.zones[rows, :, Z_RUN_NS] = now
        for r in rows.tolist():
            self.entered[r] = []
            self.deferred[r] = []
            self.last_state[r] = None
        self.reindex()
        return rows

    def free(self, row: int) -> None:
        """The track at `row` is gone (call reindex after a batch of these)."""
        self.I[row, LIVE] = 0
        self.entered[row] = []
        self.deferred[row] = []
        self.last_state[row] = None

    def live_rows(self) -> np.ndarray:
        return np.flatnonzero(self.I[:, LIVE])

    # ---- checkpoint ----------------------------------------------------------------------

    def track_json(self, row: int, names: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
        """One track, JSON-able; per-rule state keyed by rule name (`names`: the line,
        zone and dwell names) so a changed rule set restores what it can."""
        line_names, zone_names, dwell_names = names
        t: dict[str, Any] = {k: self.F[row, s].tolist() for k, s in F_NAMES.items()}
        t.update({k: int(self.I[row, j]) for j, k in enumerate(I_NAMES) if k != "live"})
        votes = self.votes[row]
        t["votes"] = {str(c): float(votes[c]) for c in np.flatnonzero(votes).tolist()}
        n = int(self.I[row, PATH_N])
        order = [j % self.dims.path for j in range(max(n - self.dims.path, 0), n)]
        t["path"] = [
            [float(self.path_xy[row, k, 0]), float(self.path_xy[row, k, 1]),
             int(self.path_t[row, k]), bool(self.path_obs[row, k])]
            for k in order
        ]  # fmt: skip
        t["lines"] = {nm: self.lines[row, k].tolist() for k, nm in enumerate(line_names)}
        t["zones"] = {nm: self.zones[row, k].tolist() for k, nm in enumerate(zone_names)}
        t["dwell"] = {nm: bool(self.dwell[row, k]) for k, nm in enumerate(dwell_names)}
        t["entered"] = list(self.entered[row])
        t["deferred"] = [d.to_json() for d in self.deferred[row]]
        st = self.last_state[row]
        t["last_state"] = base64.b64encode(st.SerializeToString()).decode() if st else ""
        return t

    def load_track(self, row: int, t: dict[str, Any], names: tuple[tuple[str, ...], ...]) -> None:
        """Inverse of track_json into an empty `row`; rules absent from `t` start clean
        (a line: its counted side is left 0, set by the caller). Raises ValueError,
        KeyError or TypeError on malformed input."""
        line_names, zone_names, dwell_names = names
        for key, s in F_NAMES.items():
            value = np.asarray(t[key], np.float64).reshape(-1)
            if value.size != s.stop - s.start:
                raise ValueError(f"checkpoint track value {key}: {t[key]!r}")
            self.F[row, s] = value
        for j, key in enumerate(I_NAMES):
            self.I[row, j] = 1 if key == "live" else int(t[key])
        votes = {int(c): float(v) for c, v in t.get("votes", {}).items()}
        if votes:
            self.classes(max(votes) + 1)
            for c, v in votes.items():
                self.votes[row, c] = v
        path = t.get("path", [])[-self.dims.path :]
        for j, (x, y, ts, obs) in enumerate(path):
            self.path_xy[row, j] = (float(x), float(y))
            self.path_t[row, j] = int(ts)
            self.path_obs[row, j] = bool(obs)
        self.I[row, PATH_N] = len(path)
        for k, nm in enumerate(line_names):
            if nm in t.get("lines", {}):
                self.lines[row, k] = np.asarray(t["lines"][nm], np.int64).reshape(4)
        for k, nm in enumerate(zone_names):
            if nm in t.get("zones", {}):
                self.zones[row, k] = np.asarray(t["zones"][nm], np.int64).reshape(6)
            else:
                self.zones[row, k, Z_RUN_NS] = self.I[row, LAST]
        for k, nm in enumerate(dwell_names):
            self.dwell[row, k] = bool(t.get("dwell", {}).get(nm, False))
        self.entered[row] = [str(z) for z in t.get("entered", [])]
        self.deferred[row] = [Fired.from_json(d) for d in t.get("deferred", [])]
        raw = t.get("last_state", "")
        self.last_state[row] = (
            events_pb2.TrackState.FromString(base64.b64decode(raw)) if raw else None
        )
