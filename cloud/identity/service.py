"""The cloud's identity work over the store: the linker pass (a background thread) and the
search by example that SearchSimilar answers (issue 42).

A linker pass reads the tracks last seen within `lookback_s` of the newest stored
appearance (capture times, so a replayed day links like a live one), runs `link` per
embedding model, and gives each group of linked tracks one identity: the smallest identity
one of them already has, else the smallest appearance_id among them. Identities only grow:
a track once linked keeps its identity when a later pass finds no partner for it (a partner
gone from the lookback is not a reason to forget). Every replica may run passes; they write
the same answer for the same rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from strata.shared.config.cloud import DEFAULT_MIN_SIMILARITY, CloudIdentityConfig

from ..metrics import CloudMetrics
from ..store import appearance_rows
from ..store.appearance_rows import AppearanceRow
from ..store.event_store import EventStore, StoreError
from ..store.snapshot_rows import Run
from .index import SimilarityIndex
from .linker import LinkSettings, TrackLook, link

log = logging.getLogger(__name__)


def settings(cfg: CloudIdentityConfig) -> LinkSettings:
    """The linker's settings from cloud.identity."""
    return LinkSettings(
        cfg.threshold, cfg.window_s, {k: tuple(v) for k, v in cfg.neighbours.items()}
    )


def identities(rows: Sequence[AppearanceRow], s: LinkSettings) -> dict[int, int]:
    """appearance_id -> identity_id for the rows whose identity a pass sets or changes."""
    by_model: dict[str, list[AppearanceRow]] = {}
    for r in rows:
        by_model.setdefault(r.model, []).append(r)
    rows_by_id = {r.appearance_id: r for r in rows}
    out: dict[int, int] = {}
    for model_rows in by_model.values():
        looks = [
            TrackLook(r.appearance_id, r.camera_id, r.first_seen_ns, r.last_seen_ns, r.vector)
            for r in model_rows
        ]
        for group in link(looks, s):
            members = [rows_by_id[int(k)] for k in group]  # type: ignore[call-overload]
            have = [m.identity_id for m in members if m.identity_id]
            ident = min(have) if have else min(m.appearance_id for m in members)
            out.update({m.appearance_id: ident for m in members if m.identity_id != ident})
    return out


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one linker pass did."""

    tracks: int
    linked: int


class IdentityLinker:
    """Links recent tracks every `link_every_s` in its own thread."""

    def __init__(self, store: EventStore, cfg: CloudIdentityConfig, metrics: CloudMetrics) -> None:
        self.store = store
        self.cfg = cfg
        self.settings = settings(cfg)
        self.metrics = metrics
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="identity-linker", daemon=True)

    def start(self) -> None:
        """Start linking in the background."""
        self._thread.start()
        log.info(
            "identities: tracks linked across cameras at cosine >= %.3f within %.0f s%s",
            self.cfg.threshold,
            self.cfg.window_s,
            f", neighbours {self.cfg.neighbours}" if self.cfg.neighbours else "",
        )

    def stop(self) -> None:
        """Stop after the pass in hand."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30.0)

    def run_once(self) -> PassResult:
        """One pass now. Raises StoreError."""
        ph = self.store.placeholder
        newest = self.store.select("SELECT MAX(last_seen_ns) FROM track_appearance", ())
        if not newest or newest[0][0] is None:
            return PassResult(0, 0)
        since = int(newest[0][0]) - int(self.cfg.lookback_s * 1e9)
        rows = self.store.select(appearance_rows.seen_since_sql(ph), (since,))
        rows = rows[-self.cfg.max_tracks_per_pass :]
        looks = [appearance_rows.from_row(r) for r in rows]
        changes = identities(looks, self.settings)
        if changes:
            sql = appearance_rows.set_identity_sql(ph)

            def work(run: Run) -> None:
                for aid, ident in sorted(changes.items()):
                    run(sql, (ident, aid))

            self.store.transaction(work)
            self.metrics.identity_tracks_linked.inc(len(changes))
            log.info("identities: %d tracks linked (%d considered)", len(changes), len(looks))
        return PassResult(len(looks), len(changes))

    def _run(self) -> None:
        while not self._stop.wait(self.cfg.link_every_s):
            try:
                self.run_once()
                self.metrics.identity_passes.labels("ok").inc()
            except StoreError as exc:
                self.metrics.identity_passes.labels("failed").inc()
                log.error(
                    "identities: linker pass failed (next in %.0f s): %s",
                    self.cfg.link_every_s,
                    exc,
                )
            except Exception:  # a bug must not end linking for good
                self.metrics.identity_passes.labels("failed").inc()
                log.exception("identities: linker pass failed")


@dataclass(frozen=True, slots=True)
class Similar:
    """One search result: the track's stored appearance and its similarity."""

    row: AppearanceRow
    similarity: float


class NoAppearanceError(LookupError):
    """The example track has no stored appearance."""


class Searcher:
    """Search by example over the store's appearances (the index follows the store)."""

    def __init__(
        self,
        store: EventStore,
        metrics: CloudMetrics,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
    ) -> None:
        """`min_similarity`: results less similar are left out when a search names no
        minimum (cloud.identity.min_similarity)."""
        self.store = store
        self.metrics = metrics
        self.min_similarity = min_similarity
        self.index = SimilarityIndex()

    def search(
        self, camera_id: str, track_uid: str, k: int, min_similarity: float, other_cameras: bool
    ) -> tuple[list[Similar], int]:
        """The k tracks most like (camera_id, track_uid), best first, the example left out,
        at least `min_similarity` alike (0: the searcher's own minimum; -1: any), and how
        many tracks were searched. Raises NoAppearanceError, StoreError."""
        t0 = time.monotonic()
        ph = self.store.placeholder
        got = self.store.select(appearance_rows.one_sql(ph), (camera_id, track_uid))
        if not got:
            raise NoAppearanceError(
                f"track {camera_id}/{track_uid} has no stored appearance (its camera needs "
                "appearance.enabled, or the track is unknown or expired)"
            )
        example = appearance_rows.from_row(got[0])
        self.index.refresh(self.store.select, ph)
        self.metrics.search_index_tracks.set(len(self.index))
        skip = camera_id if other_cameras else ""
        hits, searched = self.index.search(example.model, example.vector, k + 1, skip)
        hits = [h for h in hits if h.appearance_id != example.appearance_id][:k]
        least = min_similarity or self.min_similarity
        hits = [h for h in hits if h.similarity >= least]
        rows = self._rows([h.appearance_id for h in hits])
        out = []
        for h in hits:
            row = rows.get(h.appearance_id)
            if row is None:  # gone from the store (retention): forget it
                self.index.remove(h.appearance_id)
                continue
            out.append(Similar(row, h.similarity))
        self.metrics.search_duration.observe(time.monotonic() - t0)
        return out, searched

    def _rows(self, ids: list[int]) -> dict[int, AppearanceRow]:
        if not ids:
            return {}
        got = self.store.select(appearance_rows.by_ids_sql(self.store.placeholder, len(ids)), ids)
        rows = [appearance_rows.from_row(r) for r in got]
        return {r.appearance_id: r for r in rows}
