"""`SnapshotReader`: the MQTT sink's snapshot hook. For a track event that names a snapshot,
the JPEG of its track's current best crop (the store keeps the highest revision), read from
the store's database on the sink worker's thread; a store error is a DeliveryError, so the
event (and its snapshot) is sent again."""

from __future__ import annotations

from dataclasses import dataclass

from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import events_pb2

from ..store.snapshot_rows import latest_jpeg_sql
from .connect import open_database
from .db import Database, LedgerError
from .events import OutboxEvent
from .sink import DeliveryError


@dataclass(frozen=True, slots=True)
class SnapshotJpeg:
    """A stored snapshot's id and JPEG."""

    snapshot_id: str
    jpeg: bytes


class SnapshotReader:
    """Reads a track's snapshot JPEG; one connection, opened on first use (not thread-safe:
    one sink worker calls it)."""

    def __init__(self, store: CloudStoreConfig, kind: int = events_pb2.SNAPSHOT_KIND_BEST_CROP):
        self.store = store
        self.kind = kind
        self._db: Database | None = None

    def __call__(self, ev: OutboxEvent) -> SnapshotJpeg | None:
        """The JPEG of `ev`'s track, when `ev` names a snapshot and the store holds one."""
        if not (ev.snapshot_id or ev.frame_snapshot_id) or not ev.track:
            return None
        try:
            if self._db is None:
                self._db = open_database(self.store)
            db = self._db
            rows = db.rows(latest_jpeg_sql(db.dialect.ph), (ev.camera_id, ev.track, self.kind))
        except LedgerError as exc:
            self.close()
            raise DeliveryError("store", f"cannot read the snapshot: {exc}") from None
        if not rows:
            return None
        return SnapshotJpeg(str(rows[0][0]), bytes(rows[0][1]))

    def close(self) -> None:
        """Close the connection (the next call opens another)."""
        if self._db is not None:
            db, self._db = self._db, None
            try:
                db.close()
            except Exception:  # closing a broken connection: nothing left to lose
                pass
