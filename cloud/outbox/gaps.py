"""`Horizon`: the highest row id of a source below which every id is committed or never
will be, so a position can move past it without skipping a straggler.

One writer (SQLite) commits ids in order: the horizon is the highest id. Several writers
(cloud replicas on PostgreSQL) take ids from one sequence and may commit them out of order,
and an insert that lost to ON CONFLICT burns its id for good: a missing id is either still
in flight or gone. Invariant: the horizon passes a missing id only after every transaction
that could hold it has ended. Ids come from nextval before the row seen above them did, so
their transactions held an xid by `settle_s` later; once the database's oldest running xid
(pg_snapshot_xmin) is at or past the next xid recorded then (pg_snapshot_xmax), those
transactions are over. A writer stuck longer than `gap_wait_s` is skipped with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .db import Database
from .sources import TableSource

log = logging.getLogger(__name__)

# Ids looked at per call; the horizon catches up over several calls after a long history.
SCAN = 10_000
# How long after seeing a gap its transaction surely holds an xid.
SETTLE_S = 0.2


@dataclass(slots=True)
class _Barrier:
    upto: int  # the highest id seen when the gap was found
    seen: float  # monotonic time it was found
    xmax: int | None = None  # next xid at seen + SETTLE_S


class Horizon:
    """Call advance() before reading; read only ids at or below what it returns."""

    def __init__(
        self,
        db: Database,
        source: TableSource,
        floor: int,
        gap_wait_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.source = source
        self.safe = floor
        self.gap_wait_s = gap_wait_s
        self.clock = clock
        self._barrier: _Barrier | None = None
        s, ph = source, db.dialect.ph
        self._max_sql = f"SELECT MAX({s.id_column}) FROM {s.table}"
        self._ids_sql = (
            f"SELECT {s.id_column} FROM {s.table} WHERE {s.id_column} > {ph} "
            f"ORDER BY {s.id_column} LIMIT {SCAN}"
        )

    def advance(self) -> int:
        """The highest id safe to read up to now."""
        if not self.db.dialect.concurrent_writers:
            top = self.db.rows(self._max_sql)[0][0]
            self.safe = max(self.safe, int(top or 0))
            return self.safe
        if self._barrier is not None and self._settled(self._barrier):
            self.safe = max(self.safe, self._barrier.upto)
            self._barrier = None
        if self._barrier is not None:
            return self.safe
        ids = [int(r[0]) for r in self.db.rows(self._ids_sql, (self.safe,))]
        for i in ids:
            if i != self.safe + 1:
                self._barrier = _Barrier(ids[-1], self.clock())
                break
            self.safe = i
        return self.safe

    def _settled(self, b: _Barrier) -> bool:
        waited = self.clock() - b.seen
        if waited < SETTLE_S:
            return False
        if b.xmax is None:
            b.xmax = int(self.db.rows("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")[0][0])
        xmin = int(self.db.rows("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")[0][0])
        if xmin >= b.xmax:
            return True
        if waited >= self.gap_wait_s:
            log.warning(
                "outbox %s: ids up to %d: a transaction has held an id for %.0f s "
                "(cloud.sinks.gap_wait_s); going on without it",
                self.source.name,
                b.upto,
                waited,
            )
            return True
        return False
