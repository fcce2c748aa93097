"""The console's identity views (issue 42): where else a track's identity was seen (on its
track page), and the tracks that look most like it (/similar, from its snapshot)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from ..identity.service import NoAppearanceError, Searcher
from ..store import appearance_rows
from ..store.event_store import EventStore
from . import views


@dataclass(frozen=True, slots=True)
class Sighting:
    """One track of an identity, or one search result, as a row of the page."""

    camera: str
    track_uid: str
    label: str
    first_seen: str
    last_seen: str
    url: str
    thumbnail: str
    identity_id: int
    similarity: float | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def similar_url(camera: str, uid: str) -> str:
    """The search-by-example page of a track."""
    return "/similar?" + urlencode({"camera": camera, "uid": uid})


def _sighting(row: appearance_rows.AppearanceRow, sim: float | None = None) -> Sighting:
    return Sighting(
        camera=row.camera_id,
        track_uid=row.track_uid,
        label=row.label,
        first_seen=views.iso(row.first_seen_ns),
        last_seen=views.iso(row.last_seen_ns),
        url=views.track_url(row.camera_id, row.track_uid),
        thumbnail=views.snapshot_url(row.camera_id, row.track_uid, "crop"),
        identity_id=row.identity_id,
        similarity=None if sim is None else round(sim, 4),
    )


class IdentityReads:
    """Blocking reads of identities and similar tracks (the app runs them on its executor)."""

    def __init__(self, store: EventStore, searcher: Searcher | None = None) -> None:
        self.store = store
        self.searcher = searcher or Searcher(store, store.metrics)

    def of_track(self, camera: str, uid: str) -> dict[str, Any]:
        """The track page's identity part: its identity, the other tracks of it in time
        order, and the search page's link (empty without a stored appearance)."""
        ph = self.store.placeholder
        got = self.store.select(appearance_rows.one_sql(ph), (camera, uid))
        if not got:
            return {"identity_id": 0, "seen_elsewhere": [], "similar_url": ""}
        me = appearance_rows.from_row(got[0])
        others: list[Sighting] = []
        if me.identity_id:
            sql = (
                f"SELECT {appearance_rows.READ_COLUMNS} FROM track_appearance "
                f"WHERE identity_id = {ph} ORDER BY first_seen_ns, appearance_id"
            )
            rows = [appearance_rows.from_row(r) for r in self.store.select(sql, (me.identity_id,))]
            others = [_sighting(r) for r in rows if r.appearance_id != me.appearance_id]
        return {
            "identity_id": me.identity_id,
            "seen_elsewhere": others,
            "similar_url": similar_url(camera, uid),
        }

    def similar(self, camera: str, uid: str, k: int, other_cameras: bool) -> dict[str, Any] | None:
        """The /similar page: the example and its k most similar tracks, best first, at
        least cloud.identity.min_similarity alike (None: the track has no stored
        appearance)."""
        try:
            found, searched = self.searcher.search(camera, uid, k, 0.0, other_cameras)
        except NoAppearanceError:
            return None
        return {
            "camera": camera,
            "track_uid": uid,
            "track_url": views.track_url(camera, uid),
            "thumbnail": views.snapshot_url(camera, uid, "crop"),
            "searched": searched,
            "other_cameras": other_cameras,
            "min_similarity": self.searcher.min_similarity,  # cloud.identity.min_similarity
            "results": [_sighting(s.row, s.similarity) for s in found],
        }
