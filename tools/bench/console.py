"""The web console's server time over a large store: SQLite and a real PostgreSQL.

Each store is filled with `--events` stored events (classified crops and track events of
several cameras and edges, labels, zones, lines, rules, one crop snapshot per track) spread
over the last week, written in bulk into the store's own schema (the store opens and migrates
the database first). Then the console's ASGI application is called in process, no socket, and
each request is timed from the call until its last body byte: the server's time alone. Each
measured request runs once unmeasured (caches warm), then `--repeats` times.

    strata bench console --json console.json

Requests: the first page of events (JSON and the HTML page), filtered pages (camera + label +
type, of track events and of crops), a deep page (`--deep-page`, reached through the cursor),
a track's detail and a week of counts; the issue's targets are 300 ms for the first and
filtered pages and 500 ms for the deep page (p99). A thumbnail's caching headers are checked.
PostgreSQL is ANALYZEd after the bulk load (what autovacuum does soon after one); SQLite is
left as a store leaves it. Without `--url` a throwaway PostgreSQL server is started on this
machine (tools/postgres_temp), sharing its CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

CAMERAS = 8
LABELS = ("person", "car", "dog", "bicycle")
ZONES = ("porch", "drive")
# Per track: new, zone entered, line crossed, end (track events) and two classified crops.
PER_TRACK = 6
WEEK_NS = 7 * 24 * 3600 * 10**9
TARGETS_MS = {"first": 300.0, "first_html": 300.0, "filtered": 300.0, "filtered_crops": 300.0}
TARGETS_MS["deep"] = 500.0
# The snapshots table as schema 5 makes it (created here when the store predates it).
_SNAPSHOTS = """CREATE TABLE IF NOT EXISTS snapshots (
    stored_id {ident}, snapshot_id TEXT NOT NULL, camera_id TEXT NOT NULL,
    edge_id TEXT NOT NULL, track_id {big} NOT NULL, track_uid TEXT NOT NULL,
    kind INTEGER NOT NULL, revision {big} NOT NULL, label TEXT NOT NULL,
    capture_ns {big} NOT NULL, stored_ns {big} NOT NULL, jpeg_bytes {big} NOT NULL,
    meta {blob} NOT NULL, jpeg {blob} NOT NULL,
    CONSTRAINT snapshots_id UNIQUE (snapshot_id),
    CONSTRAINT snapshots_track UNIQUE (camera_id, track_uid, kind))"""
_SNAPSHOT_COLUMNS = (
    "snapshot_id, camera_id, edge_id, track_id, track_uid, kind, revision, label, capture_ns, "
    "stored_ns, jpeg_bytes, meta, jpeg"
)
_SNAPSHOT_INDEX = "CREATE INDEX IF NOT EXISTS snapshots_uid ON snapshots (track_uid)"


@dataclass(frozen=True, slots=True)
class Timing:
    """One request's server times over the repeats."""

    name: str
    path: str
    status: int
    rows: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    target_ms: float | None
    ok: bool | None  # None: no target


@dataclass(frozen=True, slots=True)
class StorePoint:
    """Every request's timing over one store, and what was in it."""

    store: str
    events: int
    crops: int
    track_events: int
    tracks: int
    fill_s: float
    deep_page: int
    timings: list[Timing] = field(default_factory=list)
    thumbnail: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Seeded:
    """What fill() wrote: counts and a track in the middle (for the detail)."""

    crops: int
    track_events: int
    tracks: int
    camera: str
    uid: str


def _track_rows(n_tracks: int, now_ns: int) -> Iterator[tuple[list[Any], list[Any], Any]]:
    """Per track: its track-event rows, crop rows and (camera, uid, label, first_seen)."""
    from strata.cloud.store import event_rows, track_rows
    from strata.cloud.store.track_filter import idempotency_key, parse_type
    from strata.shared.contracts import analytics_pb2, common_pb2, current_version, events_pb2

    version = current_version()
    step = max(1, (WEEK_NS - 60 * 10**9) // max(1, n_tracks))
    start = now_ns - WEEK_NS + 30 * 10**9
    box = common_pb2.Box(x1=100, y1=200, x2=180, y2=400)
    for i in range(n_tracks):
        cam_i = i % CAMERAS
        camera, edge = f"cam-{cam_i}", f"edge-{cam_i % 2}"
        label = LABELS[(i // CAMERAS) % len(LABELS)]
        zone = ZONES[i % len(ZONES)]
        first = start + i * step
        track_id = i // CAMERAS % 1000 + 1  # ids come back, as a tracker's do
        uid = f"{first}-{track_id}"
        tracks: list[Any] = []
        for seq, (kind, dt_ms, extra) in enumerate(
            (
                ("new", 0, {}),
                ("zone_entered", 2000, {"zone": zone, "rule": f"{zone}-watch"}),
                (
                    "line_crossed",
                    4000,
                    {
                        "line": "gate",
                        "rule": "gate-count",
                        "direction": events_pb2.CROSSING_DIRECTION_IN
                        if i % 3
                        else events_pb2.CROSSING_DIRECTION_OUT,
                    },
                ),
                ("end", 8000, {}),
            )
        ):
            capture = first + dt_ms * 10**6
            ev = events_pb2.TrackEvent(
                version=version,
                type=parse_type(kind),  # type: ignore[arg-type]
                camera_id=camera,
                track_id=track_id,
                track_uid=uid,
                sequence=i * 4 + seq + 1,
                track_sequence=seq + 1,
                capture_ns=capture,
                edge_id=edge,
                frame_width=640,
                frame_height=480,
                after=events_pb2.TrackState(label=label, score=0.8, top_score=0.9),
                observed=True,
                positions=seq + 1,
                observed_positions=seq + 1,
                **extra,
            )
            for k in range(seq + 1):
                ev.path.points.add(
                    x=0.2 + 0.1 * k, y=0.9 - 0.05 * k, capture_ns=first + k, observed=True
                )
            ev.idempotency_key = idempotency_key(ev)
            row = list(track_rows.insert_row(ev))
            row[10] = capture + 40 * 10**6  # stored 40 ms after capture
            tracks.append(tuple(row))
        crops: list[Any] = []
        for k, dt_ms in enumerate((1000, 5000)):
            capture = first + dt_ms * 10**6
            crop = analytics_pb2.Event(
                edge_id=edge,
                crop_id=f"{uid}-{k}",
                camera_id=camera,
                sequence=i * 2 + k + 1,
                capture_ns=capture,
                label=label,
                score=0.87,
                track_id=track_id,
                model_version=1,
                # The detector's label is the track's: filters and the console read it.
                edge_detection=common_pb2.Detection(
                    box=box, score=0.7, label=label, track_id=track_id
                ),
            )
            row = list(event_rows.insert_row(crop))
            row[6] = capture + 60 * 10**6
            crops.append(tuple(row))
        yield tracks, crops, (camera, edge, track_id, uid, label, first)


def _snapshot_row(camera: str, edge: str, track_id: int, uid: str, label: str, t: int) -> Any:
    return (f"{camera}/{uid}/1/1", camera, edge, track_id, uid, 1, 1, label, t, t)


def fill(db: Path | str, events: int, jpeg: bytes) -> Seeded:
    """Write about `events` events (crops and track events) into the migrated store `db`
    (a SQLite path or a PostgreSQL URL), plus one crop snapshot per track."""
    from strata.cloud.store import event_rows, track_rows

    n_tracks = max(1, events // PER_TRACK)
    now_ns = time.time_ns()
    track_batch: list[Any] = []
    crop_batch: list[Any] = []
    snap_batch: list[Any] = []
    middle = ("", "")
    for i, (tracks, crops, (cam, edge, tid, uid, label, first)) in enumerate(
        _track_rows(n_tracks, now_ns)
    ):
        track_batch += tracks
        crop_batch += crops
        snap_batch.append((*_snapshot_row(cam, edge, tid, uid, label, first), len(jpeg)))
        if i == n_tracks // 2:
            middle = (cam, uid)
    meta = b""
    if isinstance(db, str):
        _fill_postgres(db, (track_batch, crop_batch, snap_batch), meta, jpeg)
    else:
        conn = sqlite3.connect(db)
        try:
            ident, big, blob = "INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "BLOB"
            conn.execute(_SNAPSHOTS.format(ident=ident, big=big, blob=blob))
            conn.execute(_SNAPSHOT_INDEX)
            conn.executemany(
                f"INSERT INTO track_events ({track_rows.INSERT_COLUMNS}) "
                f"VALUES ({track_rows.placeholders('?')})",
                track_batch,
            )
            conn.executemany(
                f"INSERT INTO events ({event_rows.INSERT_COLUMNS}) "
                f"VALUES ({event_rows.placeholders('?')})",
                crop_batch,
            )
            conn.executemany(
                f"INSERT INTO snapshots ({_SNAPSHOT_COLUMNS}) VALUES ({', '.join('?' * 13)})",
                [(*s, meta, jpeg) for s in snap_batch],
            )
            conn.commit()
        finally:
            conn.close()
    return Seeded(len(crop_batch), len(track_batch), n_tracks, *middle)


def _fill_postgres(url: str, batches: tuple[list[Any], ...], meta: bytes, jpeg: bytes) -> None:
    import psycopg
    from strata.cloud.store import event_rows, track_rows

    track_batch, crop_batch, snap_batch = batches
    with psycopg.connect(url) as conn:
        ident = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
        conn.execute(_SNAPSHOTS.format(ident=ident, big="BIGINT", blob="BYTEA"))
        conn.execute(_SNAPSHOT_INDEX)
        with conn.cursor() as cur:
            for table, columns, rows in (
                ("track_events", track_rows.INSERT_COLUMNS, track_batch),
                ("events", event_rows.INSERT_COLUMNS, crop_batch),
                ("snapshots", _SNAPSHOT_COLUMNS, [(*s, meta, jpeg) for s in snap_batch]),
            ):
                with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


async def asgi_get(app: Any, path: str) -> tuple[int, dict[str, str], bytes, float]:
    """GET `path` through the ASGI app in process: status, headers, body and the seconds
    from the call to the last body byte."""
    target, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": target,
        "raw_path": target.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    status = 0
    headers: dict[str, str] = {}
    body = bytearray()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # never: no request here disconnects
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers.update({k.decode().lower(): v.decode() for k, v in message["headers"]})
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    t0 = time.perf_counter()
    await app(scope, receive, send)
    return status, headers, bytes(body), time.perf_counter() - t0


def _rows(body: bytes, status: int) -> int:
    if status != 200:
        return 0
    try:
        doc = json.loads(body)
    except ValueError:
        return -1  # HTML
    if "events" in doc:
        return len(doc["events"])
    return len(doc.get("series", []))


async def _measure(app: Any, name: str, path: str, repeats: int) -> Timing:
    status, _, body, _ = await asgi_get(app, path)  # warm
    if status != 200:
        raise RuntimeError(f"{name}: {path} answered {status}: {body[:200]!r}")
    times = []
    for _ in range(repeats):
        status, _, body, dt = await asgi_get(app, path)
        times.append(dt * 1e3)
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    target = TARGETS_MS.get(name)
    p99 = round(q[98], 2)
    return Timing(
        name,
        path,
        status,
        _rows(body, status),
        round(q[49], 2),
        p99,
        round(max(times), 2),
        target,
        None if target is None else p99 < target,
    )


async def _deep_cursor(app: Any, page: int, page_size: int, most: int) -> str:
    """The cursor that opens page `page` (of `page_size` rows), walked in pages of `most`."""
    skip = (page - 1) * page_size
    cursor = ""
    while skip > 0:
        limit = min(most, skip)
        q = {"limit": str(limit), **({"before": cursor} if cursor else {})}
        status, _, body, _ = await asgi_get(app, "/api/events?" + urlencode(q))
        doc = json.loads(body)
        if status != 200 or not doc["next"]:
            raise RuntimeError(f"the store has fewer than {page} pages")
        cursor = doc["next"]
        skip -= limit
    return cursor


async def _requests(app: Any, seeded: Seeded, deep_page: int, repeats: int) -> StorePoint:
    from strata.shared.config.cloud import CloudHttpConfig

    http = CloudHttpConfig()
    cursor = await _deep_cursor(app, deep_page, http.page_size, http.max_page_size)
    filt = {"camera": "cam-3", "label": "car"}
    paths = {
        "first": "/api/events",
        "first_html": "/",
        "filtered": "/api/events?" + urlencode({**filt, "type": "line_crossed"}),
        "filtered_crops": "/api/events?" + urlencode({**filt, "type": "crop"}),
        "deep": "/api/events?" + urlencode({"before": cursor}),
        "track": "/api/track?" + urlencode({"camera": seeded.camera, "uid": seeded.uid}),
        "counts_week": "/api/counts?period=week",
    }
    timings = [await _measure(app, name, path, repeats) for name, path in paths.items()]
    thumb = "/api/snapshot?" + urlencode({"camera": seeded.camera, "uid": seeded.uid})
    status, headers, body, _ = await asgi_get(app, thumb)
    thumbnail = {
        "status": str(status),
        "content_type": headers.get("content-type", ""),
        "cache_control": headers.get("cache-control", ""),
        "etag": headers.get("etag", ""),
        "bytes": str(len(body)),
    }
    return StorePoint("", 0, 0, 0, 0, 0.0, deep_page, timings, thumbnail)


def measure_store(
    name: str, cfg: dict[str, Any], events: int, deep_page: int, repeats: int
) -> StorePoint:
    """Open (migrate), fill, then time the console's requests over one store."""
    import cv2
    import numpy as np
    from strata.cloud.api.watch import WatchHub
    from strata.cloud.console.app import Console
    from strata.cloud.console.reads import ConsoleParts
    from strata.cloud.console.security import Gate
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.store.registry import open_store
    from strata.shared.config.base import validate_model
    from strata.shared.config.cloud import CloudConfig

    full = validate_model(CloudConfig, {"store": cfg})
    metrics = CloudMetrics()
    open_store(full.store, metrics).close()  # creates and migrates the schema
    ok, enc = cv2.imencode(".jpg", np.full((120, 160, 3), (40, 120, 200), np.uint8))
    assert ok
    jpeg = enc.tobytes()
    t0 = time.perf_counter()
    db: Path | str = full.store.url or Path(full.store.path)
    seeded = fill(db, events, jpeg)
    fill_s = time.perf_counter() - t0
    hub = WatchHub(metrics, 16, 64)
    store = open_store(full.store, metrics, hub)
    store.start()
    executor = ThreadPoolExecutor(4)
    try:
        console = Console(
            ConsoleParts(store, hub, executor, full.http), Gate(None, 3600.0), tls=False
        )
        point: StorePoint = asyncio.run(_requests(console.asgi, seeded, deep_page, repeats))
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
        hub.close()
        store.close()
    return StorePoint(
        name,
        seeded.crops + seeded.track_events,
        seeded.crops,
        seeded.track_events,
        seeded.tracks,
        round(fill_s, 2),
        deep_page,
        point.timings,
        point.thumbnail,
    )


OPTIONS = ("events", "repeats", "deep_page", "url", "quick", "stores")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """`strata bench console`'s options."""
    ap.add_argument("--events", type=int, default=100_000, help="stored events per store")
    ap.add_argument("--repeats", type=int, default=30, help="timed repeats of each request")
    ap.add_argument(
        "--deep-page", type=int, default=500, help="the deep page's number (50 events a page)"
    )
    ap.add_argument(
        "--stores",
        default="sqlite,postgresql",
        help="comma-separated back ends to measure (sqlite, postgresql)",
    )
    ap.add_argument(
        "--url", default="", help="an empty PostgreSQL database (default: start a server)"
    )
    ap.add_argument("--out", type=Path, default=Path("bench-out/console"), help="output folder")
    ap.add_argument("--json", type=Path, help="also write the JSON here")
    ap.add_argument("--quick", action="store_true", help="5,000 events, 5 repeats, deep page 50")


def markdown(doc: dict[str, Any]) -> str:
    """console.md: one line per request and store."""
    lines = [
        f"`{doc['command']}`, {doc['date']}, load {doc['machine']['loadavg_before'][0]:.1f} -> "
        f"{doc['machine']['loadavg_after'][0]:.1f}, {doc['machine']['cpus']} CPUs.",
        "",
        "| store | events | request | rows | p50 ms | p99 ms | target (p99) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in doc["points"]:
        for t in p["timings"]:
            target = "" if t["target_ms"] is None else f"{t['target_ms']:.0f} ms"
            if t["ok"] is not None:
                target += " met" if t["ok"] else " **missed**"
            lines.append(
                f"| {p['store']} | {p['events']:,} | {t['name']} | {t['rows']} | "
                f"{t['p50_ms']:.1f} | {t['p99_ms']:.1f} | {target} |"
            )
    for p in doc["points"]:
        th = p["thumbnail"]
        lines.append("")
        lines.append(
            f"{p['store']} thumbnail: {th['status']} {th['content_type']}, "
            f"Cache-Control `{th['cache_control']}`, ETag `{th['etag']}`."
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Fill each store, time the console over it; 0 when every target is met and every
    thumbnail carries its caching headers."""
    if args.quick:
        args.events, args.repeats, args.deep_page = 5000, 5, 50
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = set(stores) - {"sqlite", "postgresql"}
    if unknown:
        raise SystemExit(f"bench console: unknown store(s) {sorted(unknown)}")
    load0 = os.getloadavg()
    points: list[StorePoint] = []
    with tempfile.TemporaryDirectory(prefix="strata-console-bench-") as tmp:
        if "sqlite" in stores:
            cfg = {"path": str(Path(tmp) / "events.sqlite")}
            points.append(measure_store("sqlite", cfg, args.events, args.deep_page, args.repeats))
        if "postgresql" in stores:
            server = None
            url = args.url
            if not url:
                from strata.tools.postgres_temp import TempPostgres

                server = TempPostgres()
                server.start()
                url = server.create_database("console")
            try:
                pg: dict[str, Any] = {"url": url, "connect_timeout_s": 10.0}
                points.append(
                    measure_store("postgresql", pg, args.events, args.deep_page, args.repeats)
                )
            finally:
                if server is not None:
                    server.stop()
    load1 = os.getloadavg()
    doc = {
        "command": getattr(args, "command_line", "strata bench console"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "points": [asdict(p) for p in points],
        "args": {k: getattr(args, k) for k in OPTIONS},
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": load0,
            "loadavg_after": load1,
        },
    }
    met = all(t.ok is not False for p in points for t in p.timings)
    cached = all("max-age" in p.thumbnail["cache_control"] and p.thumbnail["etag"] for p in points)
    doc["targets_met"] = met
    doc["thumbnails_cached"] = cached
    text = json.dumps(doc, indent=2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "console.json").write_text(text + "\n")
    (args.out / "console.md").write_text(markdown(doc))
    if args.json:
        args.json.write_text(text + "\n")
    print(markdown(doc), end="")
    return 0 if met and cached else 1
