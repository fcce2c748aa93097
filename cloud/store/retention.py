"""Retention: tracks older than their policy allows leave the store with their track events,
snapshots and clips, pruned in the background (cloud.snapshots.retention; docs/events.md).

A track's age is the time since its last event (its latest capture). It is kept as long as
the longest days that apply to it: each of its labels' days (`labels`, else `days`) and the
days of every rule it fired (`rules`); 0 days is forever and wins. Snapshots of a track that
has no event left (its events were refused, or never came) follow their own label. A clip
goes when the last track it shows does (so it stays as long as its longest-kept track); a
clip none of whose tracks has an event left goes after `days` from its start. The
policy is computed in SQL per track (no Python loop over rows), a bounded number of tracks
per transaction, so a long history is worked off over several transactions without holding
the writer for long. Every replica prunes; a second delete of the same rows deletes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.shared.config.cloud import CloudRetentionConfig

from ..metrics import CloudMetrics
from . import appearance_rows, clip_rows
from .event_store import EventStore, StoreError
from .snapshot_rows import Run

log = logging.getLogger(__name__)

DAY_NS = 86_400 * 10**9
# "Forever" as a time span: far beyond any capture time plus it, still inside int64.
FOREVER_NS = 1 << 61
# Transactions per pass at most (a pass that has more to do goes on next time).
MAX_ROUNDS = 1000


def _ns(days: float) -> int:
    return FOREVER_NS if days <= 0 else int(days * DAY_NS)


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one pass deleted."""

    tracks: int = 0
    track_events: int = 0
    snapshots: int = 0
    clips: int = 0
    clip_bytes: int = 0

    def __add__(self, o: Pruned) -> Pruned:
        return Pruned(
            self.tracks + o.tracks,
            self.track_events + o.track_events,
            self.snapshots + o.snapshots,
            self.clips + o.clips,
            self.clip_bytes + o.clip_bytes,
        )


class RetentionPolicy:
    """The config as SQL: how long a row's track is kept, in ns."""

    def __init__(self, cfg: CloudRetentionConfig) -> None:
        self.cfg = cfg

    def _case(self, column: str, days: dict[str, float], default_ns: int, ph: str) -> str:
        """CASE over `column`'s values (parameters) to ns literals; the args are `days`' keys."""
        if not days:
            return str(default_ns)
        whens = " ".join(f"WHEN {ph} THEN {_ns(d)}" for d in days.values())
        return f"CASE {column} {whens} ELSE {default_ns} END"

    def keep_ns(self, alias: str, ph: str, rules: bool) -> tuple[str, list[Any]]:
        """SQL for the ns a row of `alias` keeps its track (label's days, or the longer of
        its rule's), and its parameters."""
        c = self.cfg
        label = self._case(f"{alias}.label", c.labels, _ns(c.days), ph)
        args: list[Any] = list(c.labels)
        if not rules or not c.rules:
            return label, args
        rule = self._case(f"{alias}.rule", c.rules, 0, ph)
        args_rule = list(c.rules)
        sql = f"CASE WHEN {label} > {rule} THEN {label} ELSE {rule} END"
        return sql, args + args_rule + args + args_rule

    def expired_tracks_sql(self, ph: str) -> tuple[str, list[Any]]:
        """(camera_id, track_uid) of tracks whose last event is older than they are kept;
        parameters after these: now_ns, limit."""
        keep, args = self.keep_ns("t", ph, rules=True)
        return (
            "SELECT t.camera_id, t.track_uid FROM track_events t "
            "GROUP BY t.camera_id, t.track_uid "
            f"HAVING MAX(t.capture_ns) + MAX({keep}) < {ph} LIMIT {ph}",
            args,
        )

    def expired_orphans_sql(self, ph: str) -> tuple[str, list[Any]]:
        """(camera_id, track_uid) of snapshots of tracks with no event left, expired by
        their label; parameters after these: now_ns, limit."""
        keep, args = self.keep_ns("s", ph, rules=False)
        return (
            "SELECT s.camera_id, s.track_uid FROM snapshots s WHERE NOT EXISTS "
            "(SELECT 1 FROM track_events t WHERE t.camera_id = s.camera_id "
            "AND t.track_uid = s.track_uid) GROUP BY s.camera_id, s.track_uid "
            f"HAVING MAX(s.capture_ns) + MAX({keep}) < {ph} LIMIT {ph}",
            args,
        )

    def expired_clips_sql(self, ph: str) -> tuple[str, list[Any]]:
        """(clip_id,) of clips none of whose tracks has an event left, started more than
        `days` ago; parameters after these: now_ns, limit. Nothing when `days` is forever."""
        return (
            "SELECT c.clip_id FROM clips c WHERE NOT EXISTS (SELECT 1 FROM clip_tracks ct "
            "JOIN track_events t ON t.camera_id = ct.camera_id AND t.track_uid = ct.track_uid "
            f"WHERE ct.clip_id = c.clip_id) AND c.start_ns + {_ns(self.cfg.days)} < {ph} "
            f"LIMIT {ph}",
            [],
        )


def _delete_clips(run: Run, clip_ids: list[str], ph: str) -> Pruned:
    """Delete the clips (row, chunks, track rows); what went."""
    chunks, row = clip_rows.delete_sql(ph)
    n = size = 0
    for clip_id in clip_ids:
        got = run(f"SELECT committed_bytes FROM clips WHERE clip_id = {ph}", (clip_id,))
        found = got.fetchone()
        run(f"DELETE FROM clip_tracks WHERE clip_id = {ph}", (clip_id,))
        run(chunks, (clip_id,))
        if run(row, (clip_id,)).rowcount > 0 and found is not None:
            n, size = n + 1, size + int(found[0])
    return Pruned(clips=n, clip_bytes=size)


def _unshown_clips(run: Run, camera: str, uid: str, ph: str) -> list[str]:
    """Forget that the track's clips show it; the clips that now show no track."""
    where = f"camera_id = {ph} AND track_uid = {ph}"
    ids = [str(r[0]) for r in run(f"SELECT clip_id FROM clip_tracks WHERE {where}", (camera, uid))]
    run(f"DELETE FROM clip_tracks WHERE {where}", (camera, uid))
    return [
        c
        for c in ids
        if run(f"SELECT 1 FROM clip_tracks WHERE clip_id = {ph}", (c,)).fetchone() is None
    ]


def _delete(tracks: list[tuple[Any, ...]], ph: str) -> Callable[[Run], Pruned]:
    where = f"camera_id = {ph} AND track_uid = {ph}"

    def work(run: Run) -> Pruned:
        n_tracks = n_events = n_snaps = 0
        clips: list[str] = []
        for camera, uid in tracks:
            e = run(f"DELETE FROM track_events WHERE {where}", (camera, uid)).rowcount
            s = run(f"DELETE FROM snapshots WHERE {where}", (camera, uid)).rowcount
            run(appearance_rows.delete_sql(ph), (camera, uid))  # the embedding goes too
            clips += _unshown_clips(run, camera, uid, ph)
            n_events += max(0, e)
            n_snaps += max(0, s)
            n_tracks += 1 if e > 0 or s > 0 else 0
        return Pruned(n_tracks, n_events, n_snaps) + _delete_clips(run, clips, ph)

    return work


def _delete_listed(rows: list[tuple[Any, ...]], ph: str) -> Callable[[Run], Pruned]:
    ids = [str(r[0]) for r in rows]
    return lambda run: _delete_clips(run, ids, ph)


def prune(
    store: EventStore, policy: RetentionPolicy, now_ns: int, batch: int
) -> tuple[Pruned, bool]:
    """Delete expired tracks, `batch` per transaction; (what went, whether all did)."""
    ph = store.placeholder
    total = Pruned()
    steps = (
        (policy.expired_tracks_sql, _delete),
        (policy.expired_orphans_sql, _delete),
        (policy.expired_clips_sql, _delete_listed),
    )
    for make, delete in steps:
        sql, args = make(ph)
        for _ in range(MAX_ROUNDS):
            rows = store.select(sql, [*args, now_ns, batch])
            if not rows:
                break
            total += store.transaction(delete(rows, ph))
            if len(rows) < batch:
                break
        else:
            return total, False
    return total, True


class Pruner:
    """Runs prune() every `prune_every_s` in its own thread (first pass soon after start)."""

    FIRST_PASS_S = 5.0

    def __init__(
        self,
        store: EventStore,
        cfg: CloudRetentionConfig,
        metrics: CloudMetrics,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.policy = RetentionPolicy(cfg)
        self.metrics = metrics
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)

    def start(self) -> None:
        """Start pruning in the background."""
        self._thread.start()
        log.info(
            "retention: tracks kept %s days (labels %s, rules %s); pruned every %.0f s",
            self.cfg.days or "forever",
            self.cfg.labels or "-",
            self.cfg.rules or "-",
            self.cfg.prune_every_s,
        )

    def stop(self) -> None:
        """Stop after the transaction in hand."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30.0)

    def run_once(self) -> Pruned:
        """One pass now: count and log what went. Raises StoreError."""
        got, done = prune(self.store, self.policy, self.clock(), self.cfg.prune_batch)
        m = self.metrics.retention_pruned
        m.labels("tracks").inc(got.tracks)
        m.labels("track_events").inc(got.track_events)
        m.labels("snapshots").inc(got.snapshots)
        m.labels("clips").inc(got.clips)
        m.labels("clip_bytes").inc(got.clip_bytes)
        if got.tracks or got.clips:
            log.info(
                "retention: pruned %d tracks (%d track events, %d snapshots), %d clips%s",
                got.tracks,
                got.track_events,
                got.snapshots,
                got.clips,
                "" if done else "; more next pass",
            )
        return got

    def _run(self) -> None:
        wait = min(self.FIRST_PASS_S, self.cfg.prune_every_s)
        while not self._stop.wait(wait):
            wait = self.cfg.prune_every_s
            try:
                self.run_once()
            except StoreError as exc:
                self.metrics.retention_failures.inc()
                log.error("retention: prune pass failed (next in %.0f s): %s", wait, exc)
            except Exception:  # a bug must not end retention for good
                self.metrics.retention_failures.inc()
                log.exception("retention: prune pass failed")
