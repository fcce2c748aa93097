"""A failed peer's uplink spool taken over (edge/uplink/stream.py): its track events,
snapshots and crops moved into this uplink, in order, in the background."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

from strata.edge.uplink.inflight import (
    UplinkParts,
)
from strata.edge.uplink.spool import CropSpool, SpoolError

log = logging.getLogger(__name__)


class SpoolAdoption(UplinkParts):
    """Takes over a failed peer's spool."""

    def adopt_spool(self, path: str, peer: str, counter: Any) -> threading.Thread | None:
        """Move a failed peer's spooled track events, track snapshots and crops into this
        uplink, in order, in the background (a thread; returned). Only with a spool of our
        own, so nothing the memory buffer cannot hold is dropped; the peer's spool lock
        keeps a live peer's crops where they are (logged)."""
        if self._spool is None:
            log.warning(
                "edge %s left crops in %s: not taken over (this edge has no uplink spool)",
                peer,
                path,
            )
            return None
        if not Path(path).exists() or Path(path).resolve() == Path(self._spool.path).resolve():
            return None
        t = threading.Thread(
            target=self._drain_peer,
            args=(path, peer, counter),
            name="edge-spool-adopt",
            daemon=True,
        )
        t.start()
        return t

    def _drain_peer(self, path: str, peer: str, counter: Any) -> None:
        try:
            other = CropSpool(path, int(self.cfg.spool_max_mib * 1024 * 1024))
        except SpoolError as exc:
            log.info("uplink spool of edge %s not taken over: %s", peer, exc)
            return
        moved = lost = events = snaps = 0
        try:
            # Events first: small, and a moved camera's events should precede what its
            # restored rules emit here; then the snapshots they name.
            while not self._stop.is_set():
                evs, bad = other.pop_events(self.cfg.queue)
                if bad:
                    self._events_dropped("uplink_spool_corrupt", bad)
                if not evs:
                    break
                self.offer_events(evs)
                self.metrics.uplink_events.labels("adopted").inc(len(evs))
                events += len(evs)
            while not self._stop.is_set():
                shots, bad = other.pop_snapshots(self.cfg.snapshot_queue)
                if bad:
                    self._snaps.dropped("uplink_spool_corrupt", bad)
                if not shots:
                    break
                self.offer_snapshots(shots)
                snaps += len(shots)
            while not self._stop.is_set():
                crops, bad = other.pop(self.cfg.queue)
                lost += bad
                if not crops:
                    break
                self.offer(crops)  # spills to our spool in order beyond the memory buffer
                moved += len(crops)
                counter.inc(len(crops))
        except (sqlite3.Error, OSError) as exc:
            log.error("uplink spool %s of edge %s: stopped taking it over: %s", path, peer, exc)
        finally:
            other.close()
        if lost:
            self._dropped("uplink_spool_corrupt", lost)
        log.warning(
            "took over %d crop(s), %d track event(s) and %d track snapshot(s) of edge %s "
            "from its spool %s",
            moved,
            events,
            snaps,
            peer,
            path,
        )
