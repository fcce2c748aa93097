"""Helpers of the console tests: a real store (a SQLite file or a real PostgreSQL database)
with its commit feed, the console on a real loopback port, events written through the store
API, and a small HTTP client."""

from __future__ import annotations

import asyncio
import http.client
import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloud_helpers import jpeg, track_event
from strata.cloud.api.watch import WatchHub
from strata.cloud.console.reads import ConsoleParts
from strata.cloud.console.security import ConsoleSecurity, console_security
from strata.cloud.console.server import ConsoleServer
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.registry import EventStore, open_store
from strata.shared.config.base import validate_model
from strata.shared.config.cloud import CloudConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import analytics_pb2, common_pb2

RULES = {
    "cameras": {
        "door": {
            "zones": [
                {"name": "porch", "points": [[0.1, 0.5], [0.6, 0.5], [0.6, 0.95], [0.1, 0.95]]}
            ],
            "lines": [{"name": "gate", "points": [[0.0, 0.7], [1.0, 0.7]]}],
        }
    }
}


@dataclass
class Running:
    """A console over a store: its server, loop and store; `db` is the SQLite file or the
    PostgreSQL URL."""

    server: ConsoleServer
    store: EventStore
    hub: WatchHub
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    executor: ThreadPoolExecutor
    db: Path | str

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        self.hub.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()


def cloud_config(db: Path | str, **http: Any) -> CloudConfig:
    """A CloudConfig over the SQLite file or PostgreSQL URL `db` whose console listens on
    127.0.0.1:0 with `http` merged in."""
    where = {"url": db, "connect_timeout_s": 5.0} if isinstance(db, str) else {"path": str(db)}
    data: dict[str, Any] = {
        "store": {**where, "write_delay_ms": 1.0},
        "http": {"enabled": True, "listen": "127.0.0.1:0", **http},
    }
    return validate_model(CloudConfig, data)


def start_console(cfg: CloudConfig, security: ConsoleSecurity | None = None) -> Running:
    """Open the store, start the console on its own loop thread (as CloudServer's)."""
    metrics = CloudMetrics()
    hub = WatchHub(metrics, 16, 64)
    store = open_store(cfg.store, metrics, hub)
    store.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    executor = ThreadPoolExecutor(4)
    sec = security or console_security(cfg)
    assert sec is not None
    rules = validate_model(RulesConfig, RULES)
    parts = ConsoleParts(store, hub, executor, cfg.http, rules, metrics.registry)
    server = ConsoleServer(parts, sec)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    db = cfg.store.url or Path(cfg.store.path)
    return Running(server, store, hub, loop, thread, executor, db)


def crop(
    i: int,
    camera: str = "door",
    t: int = 0,
    track_id: int = 0,
    label: str = "car",
    edge_label: str = "",
) -> Any:
    """A classified crop as the service stores it."""
    return analytics_pb2.Event(
        edge_id="edge-a",
        crop_id=f"c{i}",
        camera_id=camera,
        sequence=i,
        capture_ns=t or 1_000_000 + i * 1000,
        label=label,
        score=0.87,
        track_id=track_id,
        edge_detection=common_pb2.Detection(
            box=common_pb2.Box(x1=100, y1=200, x2=180, y2=400),
            score=0.7,
            # The detector's label is the object's (filters match it); `label` above is the
            # classifier's evidence, as a crop stored before verdicts were carries it.
            label=edge_label or label,
            track_id=track_id,
        ),
    )


def put_crop(run: Running, ev: Any) -> Any:
    return run.store.submit(ev).result(10).event


def put_track(run: Running, seq: int, **kw: Any) -> Any:
    ev = track_event(seq, **kw)
    return run.store.submit_track(ev).result(10).stored


_SNAPSHOTS = {
    "sqlite": """CREATE TABLE IF NOT EXISTS snapshots (
        stored_id INTEGER PRIMARY KEY AUTOINCREMENT, snapshot_id TEXT NOT NULL UNIQUE,
        camera_id TEXT NOT NULL, edge_id TEXT NOT NULL, track_id INTEGER NOT NULL,
        track_uid TEXT NOT NULL, kind INTEGER NOT NULL, revision INTEGER NOT NULL,
        label TEXT NOT NULL, capture_ns INTEGER NOT NULL, stored_ns INTEGER NOT NULL,
        jpeg_bytes INTEGER NOT NULL, meta BLOB NOT NULL, jpeg BLOB NOT NULL,
        UNIQUE (camera_id, track_uid, kind))""",
    "postgres": """CREATE TABLE IF NOT EXISTS snapshots (
        stored_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        snapshot_id TEXT NOT NULL UNIQUE,
        camera_id TEXT NOT NULL, edge_id TEXT NOT NULL, track_id BIGINT NOT NULL,
        track_uid TEXT NOT NULL, kind INTEGER NOT NULL, revision BIGINT NOT NULL,
        label TEXT NOT NULL, capture_ns BIGINT NOT NULL, stored_ns BIGINT NOT NULL,
        jpeg_bytes BIGINT NOT NULL, meta BYTEA NOT NULL, jpeg BYTEA NOT NULL,
        UNIQUE (camera_id, track_uid, kind))""",
}


def execute(db: Path | str, statements: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """Run SQL with `?` placeholders on the SQLite file or PostgreSQL URL `db` in one
    transaction; the first row of each statement (None when it returns none)."""
    out: list[Any] = []
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db) as pg:
            for sql, args in statements:
                cur = pg.execute(sql.replace("?", "%s"), args)
                out.append(cur.fetchone() if cur.description else None)
        return out
    conn = sqlite3.connect(db)
    try:
        for sql, args in statements:
            cur = conn.execute(sql, args)
            out.append(cur.fetchone() if cur.description else None)
        conn.commit()
    finally:
        conn.close()
    return out


def put_snapshot(db: Path | str, camera: str, uid: str, kind: int) -> bytes:
    """A snapshot row as schema 5 stores it (the table made here when the store has none),
    in the SQLite file or PostgreSQL URL `db`."""
    from strata.shared.contracts import events_pb2

    body = jpeg((30, 120, 200), 64, 48)
    first, track = uid.split("-")
    meta = events_pb2.TrackEvent().SerializeToString()  # any bytes: the console never reads it
    insert = (
        "INSERT INTO snapshots (snapshot_id, camera_id, edge_id, track_id, track_uid, kind, "
        "revision, label, capture_ns, stored_ns, jpeg_bytes, meta, jpeg) "
        "VALUES (?, ?, 'edge-a', ?, ?, ?, 1, 'person', ?, ?, ?, ?, ?)"
    )
    values = (
        f"{camera}/{uid}/{kind}/1",
        camera,
        int(track),
        uid,
        kind,
        int(first),
        int(first),
        len(body),
        meta,
        body,
    )
    table = _SNAPSHOTS["postgres" if isinstance(db, str) else "sqlite"]
    execute(db, [(table, ()), (insert, values)])
    return body


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def get(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    body: bytes | None = None,
) -> Reply:
    """One HTTP request to the console on 127.0.0.1."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()
