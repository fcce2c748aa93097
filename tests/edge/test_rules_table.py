"""The packed track table: ids to rows, rows reused, a track's JSON round trip."""

import numpy as np
from strata.edge.rules.table import LIVE, PATH_N, Dims, TrackTable, X, Y


def test_rows_are_found_reused_and_grown() -> None:
    tb = TrackTable(Dims(lines=1, zones=2, dwell=0, path=4), cap=2)
    rows = tb.admit(np.array([7, 3], np.uint64), 100, np.array([[0.1, 0.2], [0.3, 0.4]]))
    assert tb.rows_of(np.array([3, 7, 5], np.uint64)).tolist() == [rows[1], rows[0], -1]
    more = tb.admit(np.array([9, 11, 12], np.uint64), 200, np.zeros((3, 2)))
    assert tb.cap >= 5 and len(set(more.tolist()) | set(rows.tolist())) == 5
    tb.free(int(rows[0]))
    tb.reindex()
    assert tb.rows_of(np.array([7], np.uint64)).tolist() == [-1]
    again = tb.admit(np.array([13], np.uint64), 300, np.array([[0.5, 0.5]]))
    assert again.tolist() == [rows[0]]  # the freed row, cleared
    assert tb.F[again[0], X] == 0.5 and tb.I[again[0], PATH_N] == 0


def test_a_track_round_trips_through_json() -> None:
    names = (("door",), ("shop", "yard"), ())
    tb = TrackTable(Dims(lines=1, zones=2, dwell=0, path=3))
    row = int(tb.admit(np.array([5], np.uint64), 10, np.array([[0.25, 0.75]]))[0])
    for j in range(5):  # the path ring wraps
        tb.path_xy[row, j % 3] = (j, j)
        tb.path_t[row, j % 3] = j
    tb.I[row, PATH_N] = 5
    tb.lines[row, 0] = (1, -1, 42, 2)
    tb.zones[row, 1] = (1, 1, 3, 2, 7, 8)
    tb.votes[row, 0] = 1.5
    data = tb.track_json(row, names)
    assert [p[2] for p in data["path"]] == [2, 3, 4]
    # Restored under a rule set where "yard" is gone and "back" is new.
    other = TrackTable(Dims(lines=1, zones=2, dwell=0, path=3))
    other.load_track(0, data, (("door",), ("back", "shop"), ()))
    assert other.I[0, LIVE] == 1 and other.F[0, Y] == 0.75
    assert other.lines[0, 0].tolist() == [1, -1, 42, 2]
    assert other.zones[0, 1].tolist() == [0, 0, 0, 0, 10, 0]  # "shop" had nothing
    assert other.zones[0, 0].tolist() == [0, 0, 0, 0, 10, 0]  # "back" starts clean
    assert [int(t) for t in other.path_t[0]] == [2, 3, 4] and other.votes[0, 0] == 1.5


def test_asking_for_the_same_ids_again_sees_tracks_that_came_and_went() -> None:
    tb = TrackTable(Dims(lines=0, zones=0, dwell=0, path=2))
    ids = np.array([4, 8], np.uint64)
    assert tb.rows_of(ids).tolist() == [-1, -1]
    rows = tb.admit(ids[:1], 0, np.zeros((1, 2)))
    first = tb.rows_of(ids)
    assert first.tolist() == [rows[0], -1]
    first[0] = 99  # the caller's copy: the table's answer is not changed through it
    assert tb.rows_of(ids).tolist() == [rows[0], -1]
    more = tb.admit(ids[1:], 1, np.zeros((1, 2)))
    assert tb.rows_of(ids).tolist() == [rows[0], more[0]]
    tb.free(int(rows[0]))
    tb.reindex()
    assert tb.rows_of(ids).tolist() == [-1, more[0]]
