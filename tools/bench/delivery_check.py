"""What `strata bench delivery` checks: every stored event at a receiver, duplicates only
under the event's own idempotency key, each camera's events first arriving in store order;
and the capture-to-receiver latency of the events delivered inside given time windows.

The stored events are read from the cloud's SQLite store with the outbox's own decoders
(cloud/outbox/sources.py), so the keys compared are the ones the outbox sends. Order is
per source (classified crops, track events) and camera: the outbox keeps positions per
source, so a camera's crops and its track events are each in their own commit order.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from strata.cloud.outbox.sources import SOURCES

from .delivery_receivers import Receipt


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event of the store as the outbox delivers it."""

    source: str
    stored_id: int
    key: str
    camera_id: str
    capture_ns: int


class StoreReader:
    """Reads the store's events incrementally (read-only, beside the running cloud)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.events: list[StoredEvent] = []
        self._after = {s.name: 0 for s in SOURCES}

    def read(self) -> list[StoredEvent]:
        """Every event stored so far, in id order per source."""
        if not self.db.exists():
            return self.events
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            for src in SOURCES:
                try:
                    rows = conn.execute(
                        f"SELECT {src.columns} FROM {src.table} AS e "
                        f"WHERE e.{src.id_column} > ? ORDER BY e.{src.id_column}",
                        (self._after[src.name],),
                    ).fetchall()
                except sqlite3.OperationalError as exc:
                    if "no such table" in str(exc):
                        continue
                    raise
                for row in rows:
                    ev = src.decode(row)
                    self.events.append(
                        StoredEvent(ev.source, ev.stored_id, ev.key, ev.camera_id, ev.capture_ns)
                    )
                    self._after[src.name] = ev.stored_id
        finally:
            conn.close()
        return self.events


@dataclass(frozen=True, slots=True)
class Verdict:
    """One receiver against the store."""

    stored: int
    # Receipts, and the distinct stored events among them.
    received: int
    unique: int
    # Stored and never received.
    lost: int
    # Receipts of an event received before (same event, same key: allowed).
    duplicates: int
    # Receipts whose key is not the stored event's key (must be 0).
    wrong_key: int
    # Receipts naming no stored event (must be 0).
    unknown: int
    # First arrivals of a camera's events (per source) after a later one (must be 0).
    out_of_order: int

    @property
    def ok(self) -> bool:
        """Nothing lost, every duplicate under its own key, order per camera kept."""
        return not (self.lost or self.wrong_key or self.unknown or self.out_of_order)


def check(stored: Sequence[StoredEvent], got: Sequence[Receipt]) -> Verdict:
    """Compare a receiver's receipts (arrival order) with the store."""
    by_id = {(s.source, s.stored_id): s for s in stored}
    seen: set[tuple[str, int]] = set()
    firsts: dict[tuple[str, str], list[int]] = defaultdict(list)
    duplicates = wrong_key = unknown = 0
    for r in got:
        ident = (r.source, r.stored_id)
        s = by_id.get(ident)
        if s is None:
            unknown += 1
            continue
        if r.key != s.key:
            wrong_key += 1
        if ident in seen:
            duplicates += 1
            continue
        seen.add(ident)
        firsts[(s.source, s.camera_id)].append(s.stored_id)
    out_of_order = sum(
        int(np.count_nonzero(np.diff(np.asarray(ids)) < 0)) for ids in firsts.values()
    )
    return Verdict(
        stored=len(by_id),
        received=len(got),
        unique=len(seen),
        lost=len(by_id) - len(seen),
        duplicates=duplicates,
        wrong_key=wrong_key,
        unknown=unknown,
        out_of_order=out_of_order,
    )


def delivered(stored: Sequence[StoredEvent], got: Sequence[Receipt]) -> bool:
    """Every stored event received at least once."""
    have = {(r.source, r.stored_id) for r in got}
    return all((s.source, s.stored_id) in have for s in stored)


@dataclass(frozen=True, slots=True)
class Latency:
    """Capture to first receipt, over the events counted."""

    events: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


def latency(got: Sequence[Receipt], windows: Sequence[tuple[int, int]]) -> Latency:
    """Capture -> first receipt of each event captured and first received inside one of
    `windows` (wall-clock ns, [start, end)); every event when `windows` is empty."""
    first: dict[tuple[str, int], Receipt] = {}
    for r in got:
        first.setdefault((r.source, r.stored_id), r)
    ms = [
        (r.received_ns - r.capture_ns) / 1e6
        for r in first.values()
        if r.capture_ns
        and (not windows or any(a <= r.capture_ns < b and r.received_ns < b for a, b in windows))
    ]
    if not ms:
        return Latency(0, None, None, None)
    arr = np.asarray(ms)
    return Latency(
        len(ms),
        round(float(np.percentile(arr, 50)), 1),
        round(float(np.percentile(arr, 99)), 1),
        round(float(arr.max()), 1),
    )
