"""What the console's pages show, read from the store (blocking: the app runs these on its
executor): a page of events, a track, a crop, the cameras, the counts, the rule editor."""

from __future__ import annotations

import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from strata.shared.config.cloud import CloudClipsConfig, CloudHttpConfig
from strata.shared.config.rules import RulesConfig

from ..api.watch import WatchHub
from ..classify.verdicts import event_verdict
from ..identity.service import Searcher
from ..store.clip_rows import ClipQuery
from ..store.event_store import EventQuery, EventStore
from ..store.track_filter import TrackQuery, type_name
from . import editor, views
from .clip_view import ClipView, clip_view
from .identity_view import IdentityReads
from .queries import SNAPSHOT_KINDS, ConsoleQueries, Cursor, EventFilter, Row
from .scrape import Scraper


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    """What the console reads and where: the store, its commit feed, the threads for
    blocking reads, its config section, the rules (drawn on detail pages), the registry
    its metrics go to and the clips' section (how clips are served)."""

    store: EventStore
    hub: WatchHub
    executor: Executor
    http: CloudHttpConfig
    rules: RulesConfig | None = None
    registry: CollectorRegistry | None = None
    clips: CloudClipsConfig = field(default_factory=CloudClipsConfig)
    # Search by example's index, shared with the gRPC service (None: the console's own).
    searcher: Searcher | None = None


class ConsoleReads:
    """The blocking reads behind the console's pages and API."""

    def __init__(self, parts: ConsoleParts, queries: ConsoleQueries, scraper: Scraper) -> None:
        self.parts = parts
        self.queries = queries
        self.scraper = scraper
        self.identities = IdentityReads(parts.store, parts.searcher)

    def camera_rules(self, camera: str) -> Any:
        rules = self.parts.rules
        return rules.cameras.get(camera) if rules is not None else None

    def event_views(self, rows: list[Row]) -> list[views.EventView]:
        keys = {(r.camera, r.track_uid) for r in rows if r.track_uid}
        snaps = self.queries.snapshot_kinds(keys) if keys else {}
        return [views.row_view(r, snaps) for r in rows]

    def page(
        self, f: EventFilter, cursor: Cursor | None, limit: int
    ) -> tuple[list[views.EventView], Cursor | None]:
        rows, nxt = self.queries.page(f, cursor, limit)
        return self.event_views(rows), nxt

    def track(self, camera: str, uid: str, at_ns: int = 0) -> dict[str, Any] | None:
        store = self.parts.store
        events, _ = store.query_tracks(TrackQuery(camera_id=camera, track_uid=uid), None, 1000)
        crops, _ = store.query(EventQuery(camera_id=camera, track_uid=uid), None, 500)
        if not events:
            return None
        kinds = self.queries.snapshot_kinds({(camera, uid)}).get((camera, uid), set())
        frame = views.snapshot_url(camera, uid, "frame") if SNAPSHOT_KINDS["frame"] in kinds else ""
        crop = views.snapshot_url(camera, uid, "crop") if SNAPSHOT_KINDS["crop"] in kinds else ""
        last = events[-1].event
        verdict, verdict_score = views.verdict_text(last)
        found = store.find_clip(ClipQuery(camera_id=camera, track_uid=uid))
        clip = clip_view(found, camera, uid, at_ns) if found is not None else None
        return {
            **self.identities.of_track(camera, uid),
            "camera": camera,
            "track_uid": uid,
            "at_ns": at_ns,
            "clip": clip.url if clip else "",
            "clip_state": clip,
            "label": last.after.label,
            "verdict": verdict,
            "verdict_score": verdict_score,
            "crop_snapshot": crop,
            "drawing": views.drawing(events, self.camera_rules(camera), frame),
            "events": [views.track_view(e, kinds) for e in events],
            "crops": [crop_record(c) for c in crops],
            "timings": [
                views.timing(
                    f"{type_name(e.event.type)} #{e.event.track_sequence}",
                    e.event.capture_ns,
                    e.stored_ns,
                )
                for e in events
            ]
            + [views.timing(f"crop {c.event_id}", c.capture_ns, c.stored_ns) for c in crops],
        }

    def crop(self, event_id: int) -> dict[str, Any] | None:
        row = self.queries.crop(event_id)
        if row is None or row.crop is None:
            return None
        c = row.crop
        b = c.edge_detection.box
        w, h = max(640, int(b.x2 * 1.1)), max(480, int(b.y2 * 1.1))
        box = views.Box(b.x1, b.y1, b.x2 - b.x1, b.y2 - b.y1) if b.x2 > b.x1 else None
        zones, lines = views.rule_shapes(self.camera_rules(c.camera_id), w, h)
        return {
            "crop": crop_record(c),
            "track_url": views.track_url(c.camera_id, row.track_uid) if row.track_uid else "",
            "drawing": views.Drawing(w, h, "", "", 0, box, zones, lines),
            "timings": [views.timing(f"crop {c.event_id}", c.capture_ns, c.stored_ns)],
        }

    def cameras(self) -> list[dict[str, Any]]:
        seen = self.queries.cameras()
        configured = set(self.parts.rules.cameras) if self.parts.rules is not None else set()
        live = self.scraper.scrape() if self.scraper.urls else None
        names = sorted(set(seen) | configured | (set(live.cameras) if live else set()))
        out = []
        for cam in names:
            s = seen.get(cam, {})
            last = max(s.get("last_crop_ns", 0), s.get("last_track_ns", 0))
            uid = self.queries.latest_frame_snapshot(cam)
            state = live.cameras.get(cam) if live else None
            out.append(
                {
                    "camera": cam,
                    "crops": s.get("crops", 0),
                    "tracks": s.get("tracks", 0),
                    "track_events": s.get("track_events", 0),
                    "last_event_ns": last,
                    "last_event": views.iso(last),
                    "snapshot": views.snapshot_url(cam, uid, "frame") if uid else "",
                    "state": state.state if state else "",
                    "error": state.error if state else "",
                    "rates": dict(state.rates) if state else {},
                    # The device's cascade target and site gate (None: it exports none).
                    "cascade": state.cascade.as_json() if state and state.cascade else None,
                    "site_gate": (state.site_gate.as_json() if state and state.site_gate else None),
                }
            )
        return out

    def counts(self, period: str, camera: str) -> dict[str, Any]:
        start, end, bucket = views.window(period, time.time_ns())
        rows = self.queries.counts(start, end, bucket, camera)
        n = (end - start) // bucket
        return {
            "period": period,
            "start": views.iso(start),
            "end": views.iso(end),
            "bucket_s": bucket // 10**9,
            "buckets": [views.iso(start + i * bucket) for i in range(n)],
            "series": views.series(rows, start, bucket, n),
            "truncated": rows.truncated,
        }

    def editor(self, camera: str) -> editor.Editor:
        uid = self.queries.latest_frame_snapshot(camera)
        event = None
        if uid:
            events, _ = self.parts.store.query_tracks(
                TrackQuery(camera_id=camera, track_uid=uid), None, 1
            )
            event = events[0].event if events else None
        background = views.snapshot_url(camera, uid, "frame") if uid else ""
        return editor.editor(camera, event, self.camera_rules(camera), background)


def crop_record(c: Any) -> dict[str, Any]:
    d = c.edge_detection
    return {
        "event_id": c.event_id,
        "camera": c.camera_id,
        "time": views.iso(c.capture_ns),
        "edge_id": c.edge_id,
        "edge_label": d.label,
        "edge_score": round(d.score, 4),
        "box": [round(d.box.x1, 1), round(d.box.y1, 1), round(d.box.x2, 1), round(d.box.y2, 1)],
        # The classifier's evidence and its verdict on edge_label (None: stored before).
        "cloud_label": c.label,
        "cloud_score": round(c.score, 4),
        "verdict": None if (info := event_verdict(c)) is None else info.as_json(),
        "model_version": c.model_version if c.HasField("model_version") else None,
    }


def jsonable(value: Any) -> Any:
    if isinstance(value, views.EventView | views.Series | ClipView):
        return value.as_json()
    if hasattr(value, "__slots__") and hasattr(value, "__dataclass_fields__"):
        return {f: jsonable(getattr(value, f)) for f in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value
