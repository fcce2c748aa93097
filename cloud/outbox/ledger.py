"""`Ledger`: one sink's delivery positions over one source, per camera, with leases.

A position is the last row id of that camera the sink is done with (delivered, or skipped
by its filter). It moves only forward, only by the lease holder (every write says
`owner = me`), so a replica that lost its lease cannot move a position another now owns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strata.shared.config.sinks import SinksConfig

from .db import Database
from .events import OutboxEvent
from .sources import TableSource

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Claim:
    """A camera this replica may deliver now, from `position` on."""

    camera_id: str
    position: int


@dataclass(frozen=True, slots=True)
class Cut:
    """What a backlog cut dropped, and the camera's position after it."""

    dropped: int
    oldest_ns: int
    position: int


@dataclass(frozen=True, slots=True)
class Backlog:
    """What a camera has not delivered yet (up to the horizon)."""

    camera_id: str
    count: int
    oldest_ns: int


class Ledger:
    """Positions and leases of (sink, source) in the outbox tables."""

    def __init__(
        self, db: Database, sink: str, source: TableSource, owner: str, cfg: SinksConfig
    ) -> None:
        self.db = db
        self.sink = sink
        self.source = source
        self.owner = owner
        self.cfg = cfg
        self.lease_ns = int(cfg.lease_s * 1e9)
        self.origin = 0
        self.scanned = 0
        d, ph, s = db.dialect, db.dialect.ph, source
        self._key = f"sink = {ph} AND source = {ph}"
        self._now = d.now_ns
        self._read_sql = (
            f"SELECT {s.columns} FROM {s.table} AS e WHERE e.{s.camera_column} = {ph} "
            f"AND e.{s.id_column} > {ph} AND e.{s.id_column} <= {ph} "
            f"ORDER BY e.{s.id_column} LIMIT {ph}"
        )

    def _args(self, *more: object) -> tuple[object, ...]:
        return (self.sink, self.source.name, *more)

    def register(self) -> int:
        """Start this sink's positions if it is new; the lowest position it may read from."""
        ph, s = self.db.dialect.ph, self.source
        with self.db.transaction():
            row = self.db.rows(
                f"SELECT origin, scanned FROM outbox_sinks WHERE {self._key}", self._args()
            )
            if not row:
                top = 0
                if self.cfg.start == "now":
                    top = int(self.db.rows(f"SELECT MAX({s.id_column}) FROM {s.table}")[0][0] or 0)
                self.db.write(
                    "INSERT INTO outbox_sinks (sink, source, origin, scanned) "
                    f"VALUES ({ph}, {ph}, {ph}, {ph}) ON CONFLICT DO NOTHING",
                    self._args(top, top),
                )
                row = self.db.rows(
                    f"SELECT origin, scanned FROM outbox_sinks WHERE {self._key}", self._args()
                )
            self.origin, self.scanned = int(row[0][0]), int(row[0][1])
            low = self.db.rows(
                f"SELECT MIN(position) FROM outbox_positions WHERE {self._key}", self._args()
            )[0][0]
        return min(self.origin, self.scanned, int(low) if low is not None else self.scanned)

    def discover(self, horizon: int) -> None:
        """Give a position (at the origin) to every camera with events up to the horizon."""
        if horizon <= self.scanned:
            return
        ph, s = self.db.dialect.ph, self.source
        cams = self.db.rows(
            f"SELECT DISTINCT {s.camera_column} FROM {s.table} "
            f"WHERE {s.id_column} > {ph} AND {s.id_column} <= {ph}",
            (self.scanned, horizon),
        )
        with self.db.transaction():
            for (cam,) in cams:
                self.db.write(
                    "INSERT INTO outbox_positions (sink, source, camera_id, position) "
                    f"VALUES ({ph}, {ph}, {ph}, {ph}) ON CONFLICT DO NOTHING",
                    self._args(str(cam), self.origin),
                )
            # Never backwards: another replica may have looked further already.
            self.db.write(
                f"UPDATE outbox_sinks SET scanned = {ph} WHERE {self._key} AND scanned < {ph}",
                (horizon, *self._args(), horizon),
            )
        self.scanned = horizon

    def claim(self) -> list[Claim]:
        """Take (or renew) the lease of every camera nobody else holds; the ones held now."""
        ph = self.db.dialect.ph
        with self.db.transaction():
            rows = self.db.rows(
                f"SELECT camera_id, position FROM outbox_positions WHERE {self._key} "
                f"AND (owner = {ph} OR lease_until_ns < {self._now}) "
                f"ORDER BY camera_id{self.db.dialect.skip_locked}",
                self._args(self.owner),
            )
            for cam, _ in rows:
                self.db.write(
                    f"UPDATE outbox_positions SET owner = {ph}, "
                    f"lease_until_ns = {self._now} + {ph} WHERE {self._key} AND camera_id = {ph}",
                    (self.owner, self.lease_ns, *self._args(cam)),
                )
        return [Claim(str(cam), int(pos)) for cam, pos in rows]

    def read(self, camera: str, after: int, upto: int, limit: int) -> list[OutboxEvent]:
        """The camera's events after `after`, up to `upto`, in commit order."""
        rows = self.db.rows(self._read_sql, (camera, after, upto, limit))
        return [self.source.decode(r) for r in rows]

    def advance(self, camera: str, position: int, delivered: int) -> bool:
        """Move the camera's position (and count); False when the lease was lost."""
        ph = self.db.dialect.ph
        n = self.db.write(
            f"UPDATE outbox_positions SET position = {ph}, delivered = delivered + {ph} "
            f"WHERE {self._key} AND camera_id = {ph} AND owner = {ph} AND position <= {ph}",
            (position, delivered, *self._args(camera), self.owner, position),
        )
        return n == 1

    def backlog(self, upto: int) -> list[Backlog]:
        """Undelivered events per camera of this sink (every replica's, up to `upto`)."""
        ph, s = self.db.dialect.ph, self.source
        rows = self.db.rows(
            f"SELECT p.camera_id, COUNT(e.{s.id_column}), MIN(e.{s.stored_ns_column}) "
            f"FROM outbox_positions p JOIN {s.table} e ON e.{s.camera_column} = p.camera_id "
            f"AND e.{s.id_column} > p.position AND e.{s.id_column} <= {ph} "
            f"WHERE p.sink = {ph} AND p.source = {ph} GROUP BY p.camera_id",
            (upto, *self._args()),
        )
        return [Backlog(str(c), int(n), int(t or 0)) for c, n, t in rows]

    def cut(self, camera: str, keep: int, upto: int) -> Cut | None:
        """Drop the camera's oldest undelivered events beyond `keep` (lease holder only)."""
        ph, s = self.db.dialect.ph, self.source
        with self.db.transaction():
            pos_rows = self.db.rows(
                f"SELECT position FROM outbox_positions WHERE {self._key} AND camera_id = {ph} "
                f"AND owner = {ph}",
                (*self._args(camera), self.owner),
            )
            if not pos_rows:
                return None
            pos = int(pos_rows[0][0])
            where = f"{s.camera_column} = {ph} AND {s.id_column} > {ph} AND {s.id_column} <= {ph}"
            new = self.db.rows(
                f"SELECT {s.id_column} FROM {s.table} WHERE {where} "
                f"ORDER BY {s.id_column} DESC LIMIT 1 OFFSET {ph}",
                (camera, pos, upto, keep),
            )
            if not new:
                return None
            cut_to = int(new[0][0])
            n, oldest = self.db.rows(
                f"SELECT COUNT(*), MIN({s.stored_ns_column}) FROM {s.table} WHERE {where}",
                (camera, pos, cut_to),
            )[0]
            self.db.write(
                f"UPDATE outbox_positions SET position = {ph}, dropped = dropped + {ph} "
                f"WHERE {self._key} AND camera_id = {ph} AND owner = {ph}",
                (cut_to, int(n), *self._args(camera), self.owner),
            )
        return Cut(int(n), int(oldest or 0), cut_to)

    def release(self) -> None:
        """Give up this replica's leases now (a clean stop: another takes over at once)."""
        ph = self.db.dialect.ph
        self.db.write(
            f"UPDATE outbox_positions SET owner = '', lease_until_ns = 0 "
            f"WHERE {self._key} AND owner = {ph}",
            self._args(self.owner),
        )
