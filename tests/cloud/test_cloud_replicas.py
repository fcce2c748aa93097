"""Two real `strata cloud` processes (replicas) on one real PostgreSQL: uplink through one,
query and watch through the other; kill -9 of a replica loses no acked event; a bad database
at start-up is a clear error and a non-zero exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
import yaml
from strata.cloud.store.registry import SCHEMA_VERSION
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version
from strata.shared.loopback import free_port
from strata.tools.postgres_temp import TempPostgres
from test_cloud_cli import wait_serving
from test_service import BLUE, GREEN, RED, crop, query

STRATA = [sys.executable, "-m", "strata.tools.cli"]
STORED = analytics_pb2.CROP_STATUS_STORED
COLOURS = (RED, GREEN, BLUE)


def write_config(tmp_path: Path, model: tuple[Path, Path], store: dict[str, object]) -> Path:
    cfg = {
        "cloud": {
            "workers": 8,
            "grace_s": 0.5,
            "model": {"path": str(model[0]), "labels_file": str(model[1])},
            "store": {"write_delay_ms": 1.0, "connect_timeout_s": 5.0, **store},
            "metrics": {"port": 0},
        }
    }
    path = tmp_path / f"strata-{len(list(tmp_path.glob('strata-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class Replica:
    """One `strata cloud` process on a free port."""

    def __init__(self, config: Path, port: int) -> None:
        self.address = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [*STRATA, "cloud", "--config", str(config), "--listen", self.address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_serving(self.address, self.proc, timeout=60)
        self.channel = grpc.insecure_channel(self.address)
        self.stub = analytics_pb2_grpc.AnalyticsStub(self.channel)

    def stop(self) -> int:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            # Its stderr holds every thread's stack (the CLI's shutdown watchdog).
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"{self.address} did not stop in 30 s:\n{err[-6000:]}") from None


@pytest.fixture
def replicas(
    tmp_path: Path, colour_model: tuple[Path, Path], pg_url: str
) -> Iterator[tuple[Replica, Replica]]:
    # One replica reads the URL from a file (a mounted Secret), the other from the config.
    secret = tmp_path / "store-url"
    secret.write_text(pg_url)
    a = Replica(write_config(tmp_path, colour_model, {"url_file": str(secret)}), free_port())
    try:
        b = Replica(write_config(tmp_path, colour_model, {"url": pg_url}), free_port())
    except BaseException:
        a.stop()
        raise
    yield a, b
    for r in (a, b):
        if r.proc.poll() is None:
            r.stop()


def batches(
    first: int, n_batches: int, size: int, edge: str = "edge-a"
) -> list[analytics_pb2.CropBatch]:
    return [
        analytics_pb2.CropBatch(
            version=current_version(),
            crops=[crop(i, COLOURS[i % 3], edge=edge) for i in range(b, b + size)],
        )
        for b in range(first, first + n_batches * size, size)
    ]


def watch(
    stub: analytics_pb2_grpc.AnalyticsStub, want: int, out: list[analytics_pb2.Event]
) -> threading.Thread:
    """Collect `want` events of a WatchEvents stream in a thread (subscribed on return)."""
    call = stub.WatchEvents(analytics_pb2.WatchEventsRequest(version=current_version()), timeout=60)
    call.initial_metadata()

    def run() -> None:
        for ev in call:
            out.append(ev)
            if len(out) >= want:
                call.cancel()
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_uplink_through_one_replica_query_and_watch_through_the_other(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    seen_b: list[analytics_pb2.Event] = []
    seen_a: list[analytics_pb2.Event] = []
    tb = watch(b.stub, 24 + 6, seen_b)
    ta = watch(a.stub, 24 + 6, seen_a)
    acks = [ack for r in a.stub.Uplink(iter(batches(0, 6, 4)), timeout=60) for ack in r.acks]
    assert len(acks) == 24 and all(x.status == STORED for x in acks)
    events = query(b.stub, camera_id="cam-1")
    assert {e.event_id for e in events} == {x.event_id for x in acks}
    by_crop = {e.crop_id: e for e in events}
    assert by_crop["c0"].label == "red" and by_crop["c1"].label == "green"
    # The other way round, and a crop resent through the other replica is not stored again.
    again = [ack for r in b.stub.Uplink(iter(batches(0, 1, 4)), timeout=60) for ack in r.acks]
    assert {x.event_id for x in again} == {
        x.event_id for x in acks if x.crop_id in {"c0", "c1", "c2", "c3"}
    }
    more = [
        ack for r in b.stub.Uplink(iter(batches(100, 1, 6, "edge-b")), timeout=60) for ack in r.acks
    ]
    assert len(more) == 6 and all(x.status == STORED for x in more)
    assert len(query(a.stub)) == 30
    for t in (ta, tb):
        t.join(20)
    want = {x.event_id for x in acks + more}
    assert {e.event_id for e in seen_b} == want and len(seen_b) == 30
    assert {e.event_id for e in seen_a} == want and len(seen_a) == 30
    for r in (a, b):
        assert r.stop() == 0


def test_kill_9_of_a_replica_loses_no_acked_event(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    total, size = 400, 4
    acked: dict[str, int] = {}
    stop_at = 60  # acks before the kill: the rest is in flight or not yet sent

    def send() -> Iterator[analytics_pb2.CropBatch]:
        for bt in batches(0, total // size, size):
            yield bt
            time.sleep(0.002)

    try:
        for resp in a.stub.Uplink(send(), timeout=60):
            for x in resp.acks:
                if x.status == STORED:
                    acked[x.crop_id] = x.event_id
            if len(acked) >= stop_at and a.proc.poll() is None:
                os.kill(a.proc.pid, signal.SIGKILL)
    except grpc.RpcError as exc:
        assert exc.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    a.proc.wait(10)
    assert a.proc.returncode == -signal.SIGKILL
    assert stop_at <= len(acked) < total, "the kill came after every crop was acked"
    # Every acked event is there, through the survivor, under the id its ack named.
    stored = {e.crop_id: e.event_id for e in query(b.stub, page_size=100)}
    assert {c: stored.get(c) for c in acked} == acked
    # The edge resends what was not acked (what a dead replica committed but never acked
    # is recognised, not stored twice): every crop exactly once.
    acks = [
        x for r in b.stub.Uplink(iter(batches(0, total // size, size)), timeout=60) for x in r.acks
    ]
    assert all(x.status == STORED for x in acks)
    final = query(b.stub, page_size=1000)
    assert sorted(e.crop_id for e in final) == sorted(f"c{i}" for i in range(total))
    assert {x.crop_id: x.event_id for x in acks if x.crop_id in acked} == acked


def start_fails(config: Path, port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STRATA, "cloud", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_database_at_start_is_a_clear_error_and_writes_nothing(
    tmp_path: Path,
    colour_model: tuple[Path, Path],
    postgres: TempPostgres,
    pg_url: str,
    port: int,
) -> None:
    # Unreachable: nothing listens on `port`.
    url = f"postgresql://strata:hush@127.0.0.1:{port}/strata"
    out = start_fails(write_config(tmp_path, colour_model, {"url": url}), free_port())
    assert out.returncode == 2
    assert "cannot open event store postgresql://strata:***@127.0.0.1" in out.stderr
    assert "hush" not in out.stderr
    # A wrong password.
    db = pg_url.rsplit("/", 1)[1]
    bad = postgres.url(db, password="hush")
    out = start_fails(write_config(tmp_path, colour_model, {"url": bad}), free_port())
    assert out.returncode == 2 and "password authentication failed" in out.stderr
    assert "hush" not in out.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone() == (0,)
    # A schema a newer strata wrote.
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))
    out = start_fails(write_config(tmp_path, colour_model, {"url": pg_url}), free_port())
    assert out.returncode == 2
    assert f"schema version {SCHEMA_VERSION + 1}; this build knows up to" in out.stderr
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
        assert tables == [("schema_version",)]
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (SCHEMA_VERSION + 1,)
        ]
