"""Event-store write throughput with ack-after-commit: SQLite against PostgreSQL through one
and through two replicas on one database.

Each replica is its own process holding one event store (what `strata cloud` holds), fed by
`--streams` threads that each keep `--window` events in flight, like Uplink streams waiting for
their acks: an event counts when its future completes, i.e. after its transaction committed
(SQLite synchronous=FULL, PostgreSQL synchronous_commit=on with fsync). Throughput is all
replicas' events over the span from the first start to the last ack.

    strata bench store --json store-bench.json

Without `--url` it starts a throwaway PostgreSQL server on this machine (tools/postgres_temp:
Debian's `postgresql` package), which then shares the CPU with the replicas.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import tempfile
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ReplicaRun:
    """What one replica process measured (wall-clock times, to combine replicas)."""

    events: int
    duplicates: int
    start: float
    end: float
    p50_ms: float
    p99_ms: float
    cpu_s: float  # this process, user + system, over [start, end]


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration: back end and number of replicas."""

    store: str
    replicas: int
    events: int
    seconds: float
    events_per_s: float
    p50_ms: float
    p99_ms: float
    # CPU per stored event: the replica processes, and the PostgreSQL server (its postmaster
    # and backends; -1 when the server is not this machine's own). Steadier than events/s
    # on a shared machine.
    replica_cpu_us: float
    server_cpu_us: float


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def server_cpu_s(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server so far: the postmaster, its live backends, and the
    backends it has reaped (its children's times)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the command name, which may hold spaces: state is field 3.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def _events(tag: str, n: int) -> list[Any]:
    from strata.shared.contracts import analytics_pb2, common_pb2

    det = common_pb2.Detection(
        box=common_pb2.Box(x1=10, y1=20, x2=110, y2=220), score=0.8, class_id=0, label="person"
    )
    base = time.time_ns()
    return [
        analytics_pb2.Event(
            edge_id=f"edge-{tag}",
            crop_id=f"{tag}-{i}",
            camera_id=f"cam-{i % 16}",
            sequence=i,
            capture_ns=base + i,
            label="person" if i % 3 else "car",
            score=0.9,
            edge_detection=det,
        )
        for i in range(n)
    ]


def replica_main(
    store_cfg: dict[str, Any], n: int, streams: int, window: int, ready: Any, out: Any
) -> None:
    """One replica: open the store, wait for the others, write n events, report a ReplicaRun."""
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.store.registry import Stored, open_store
    from strata.shared.config.base import validate_model
    from strata.shared.config.cloud import CloudStoreConfig

    store = open_store(validate_model(CloudStoreConfig, store_cfg), CloudMetrics())
    store.start()
    events = _events(uuid.uuid4().hex[:8], n)
    lat: list[float] = []
    dups = [0]
    lock = threading.Lock()

    def stream(part: list[Any]) -> None:
        inflight: deque[tuple[float, Future[Stored]]] = deque()
        mine: list[float] = []
        d = 0

        def settle() -> None:
            nonlocal d
            t, fut = inflight.popleft()
            d += fut.result(60).duplicate
            mine.append(time.perf_counter() - t)

        for ev in part:
            if len(inflight) >= window:
                settle()
            inflight.append((time.perf_counter(), store.submit(ev)))
        while inflight:
            settle()
        with lock:
            lat.extend(mine)
            dups[0] += d

    parts = [events[i::streams] for i in range(streams)]
    threads = [threading.Thread(target=stream, args=(p,)) for p in parts]
    ready.wait(120)  # every replica has imported and opened its store
    start, cpu0 = time.time(), _cpu_s()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end, cpu1 = time.time(), _cpu_s()
    store.close()
    q = statistics.quantiles(lat, n=100)
    run = ReplicaRun(n, dups[0], start, end, q[49] * 1e3, q[98] * 1e3, cpu1 - cpu0)
    out.put(asdict(run))


def measure(
    name: str,
    store_cfgs: list[dict[str, Any]],
    n: int,
    streams: int,
    window: int,
    postmaster: int | None = None,
) -> Point:
    """Run one process per store config at once; combine their runs."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ready = ctx.Barrier(len(store_cfgs) + 1)  # and this process, to read the server's CPU
    procs = [
        ctx.Process(target=replica_main, args=(cfg, n, streams, window, ready, out))
        for cfg in store_cfgs
    ]
    for p in procs:
        p.start()
    ready.wait(180)
    server0 = server_cpu_s(postmaster) if postmaster else 0.0
    runs = [ReplicaRun(**out.get(timeout=600)) for _ in procs]
    # Includes closing the replicas' connections: a few backends' exits, next to nothing.
    server = server_cpu_s(postmaster) - server0 if postmaster else -1.0
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise RuntimeError(f"{name}: a replica exited with {p.exitcode}")
    if any(r.duplicates for r in runs):
        raise RuntimeError(f"{name}: unique crop ids came back as duplicates")
    total = sum(r.events for r in runs)
    span = max(r.end for r in runs) - min(r.start for r in runs)
    return Point(
        name,
        len(runs),
        total,
        round(span, 3),
        round(total / span, 1),
        round(max(r.p50_ms for r in runs), 2),
        round(max(r.p99_ms for r in runs), 2),
        round(sum(r.cpu_s for r in runs) / total * 1e6, 1),
        round(server / total * 1e6, 1) if server >= 0 else -1.0,
    )


def _median_point(runs: list[Point]) -> Point:
    """The run with the median throughput (its latencies with it)."""
    return sorted(runs, key=lambda p: p.events_per_s)[len(runs) // 2]


OPTIONS = ("events", "streams", "window", "rounds", "url")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """`strata bench store`'s options."""
    ap.add_argument("--events", type=int, default=20000, help="events per replica")
    ap.add_argument("--streams", type=int, default=8, help="writer threads per replica")
    ap.add_argument("--window", type=int, default=32, help="events in flight per thread")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds; each runs every configuration once, interleaved (median reported)",
    )
    ap.add_argument(
        "--url", default="", help="an existing PostgreSQL database (default: start one)"
    )
    ap.add_argument("--json", type=Path, help="write the points here")


def run(args: argparse.Namespace) -> int:
    """Run the comparison; print a table, optionally write JSON."""
    common = {"write_batch": 256, "write_delay_ms": 2.0, "max_pending": 8192}
    load0 = os.getloadavg()
    runs: dict[tuple[str, int], list[Point]] = {}
    with tempfile.TemporaryDirectory(prefix="strata-store-bench-") as tmp:
        server = None
        if not args.url:
            from strata.tools.postgres_temp import TempPostgres

            server = TempPostgres()
            server.start()
        try:
            configs: list[tuple[str, list[dict[str, Any]]]] = [
                ("sqlite", [{**common, "path": str(Path(tmp) / "events.sqlite")}])
            ]
            for replicas in (1, 2):
                url = server.create_database(f"bench{replicas}") if server else args.url
                configs.append(("postgresql", [{**common, "url": url, "pool_size": 4}] * replicas))
            # Interleaved, so a change of the machine's load hits every configuration alike.
            for _ in range(args.rounds):
                for name, cfgs in configs:
                    pm = server.postmaster() if server is not None and name != "sqlite" else None
                    point = measure(name, cfgs, args.events, args.streams, args.window, pm)
                    runs.setdefault((name, len(cfgs)), []).append(point)
        finally:
            if server is not None:
                server.stop()
    load1 = os.getloadavg()
    points = [_median_point(r) for r in runs.values()]
    print(
        f"{'store':<11} {'replicas':>8} {'events':>7} {'events/s':>9} {'all rounds':>30} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'CPU us/event replicas + server (median)':>40}"
    )
    for p, r in zip(points, runs.values(), strict=True):
        every = "/".join(f"{x.events_per_s:.0f}" for x in r)
        rep = statistics.median(x.replica_cpu_us for x in r)
        srv = statistics.median(x.server_cpu_us for x in r)
        cpu = f"{rep:.0f} + {srv:.0f}" if srv >= 0 else f"{rep:.0f}"
        print(
            f"{p.store:<11} {p.replicas:>8} {p.events:>7} {p.events_per_s:>9.0f} {every:>30} "
            f"{p.p50_ms:>7.1f} {p.p99_ms:>7.1f} {cpu:>40}"
        )
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}; {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "points": [asdict(p) for p in points],
                    "rounds": [[asdict(x) for x in r] for r in runs.values()],
                    "args": {k: getattr(args, k) for k in OPTIONS} | {"json": str(args.json)},
                    "machine": {
                        "cpus": os.cpu_count(),
                        "platform": platform.platform(),
                        "loadavg_before": load0,
                        "loadavg_after": load1,
                    },
                },
                indent=2,
            )
        )
    return 0
