"""Search by example at scale (issue 42): SearchSimilar's ranking over 100,000 stored tracks.

Two figures, in one run on this machine: the index alone (one float32 matrix-vector product
over every track of the model, then a partial sort for the top k), and the whole search the
endpoint runs (cloud/identity/service.Searcher over a SQLite store holding the tracks: the
example's row, the index's incremental refresh, the ranking, the result rows). Embeddings are
people seen several times each with noise, L2-normalised and stored as float16 as the edge
sends them; the ranking's cost does not depend on what they show.

    strata bench identity-search --tracks 100000 --json identity-search.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "osnet_x0_25_msmt17"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The part's arguments."""
    p.add_argument("--tracks", type=int, default=100_000, help="tracks in the index")
    p.add_argument("--dim", type=int, default=512, help="values per embedding")
    p.add_argument("--queries", type=int, default=300, help="searches timed per figure")
    p.add_argument("--k", type=int, default=20, help="tracks each search returns")
    p.add_argument("--cameras", type=int, default=16, help="cameras the tracks come from")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-store", action="store_true", help="time the index alone (no SQLite searcher)"
    )
    p.add_argument("--json", metavar="OUT", default="", help="write the figures here")


def embeddings(n: int, dim: int, seed: int) -> np.ndarray:
    """n L2-normalised float32 rows, people seen about 5 times each, float16-rounded."""
    rng = np.random.default_rng(seed)
    people = rng.normal(size=(max(1, n // 5), dim)).astype(np.float32)
    who = rng.integers(0, len(people), size=n)
    v = people[who] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim) * 4
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    out: np.ndarray = v.astype(np.float16).astype(np.float32)
    return out


def _percentiles(ms: list[float]) -> dict[str, float]:
    a = np.array(ms)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def index_search(vs: np.ndarray, cameras: list[str], queries: int, k: int) -> dict[str, Any]:
    """The index alone: build time, memory and per-search times."""
    from strata.cloud.identity.index import SimilarityIndex

    t0 = time.perf_counter()
    index = SimilarityIndex()
    index.add_matrix(MODEL, np.arange(1, len(vs) + 1), cameras, vs)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    ms, bare = [], []
    for q in rng.integers(0, len(vs), size=queries):
        t = time.perf_counter()
        hits, _ = index.search(MODEL, vs[q], k + 1)
        ms.append((time.perf_counter() - t) * 1e3)
        assert hits and hits[0].appearance_id == q + 1, "a track is its own nearest"
        # The physical limit beside it, same query: the bare product over the same matrix.
        t = time.perf_counter()
        vs @ vs[q]
        bare.append((time.perf_counter() - t) * 1e3)
    got = _percentiles(ms)
    return {
        "build_s": round(build_s, 2),
        "matrix_mb": round(vs.nbytes / 2**20, 1),
        **got,
        "bare_matvec": _percentiles(bare),
        "p50_over_bare": round(got["p50_ms"] / max(1e-9, float(np.percentile(bare, 50))), 2),
    }


def fill_store(path: Path, vs: np.ndarray, cameras: list[str]) -> float:
    """A SQLite event store at schema 8 holding one appearance per row of vs; seconds."""
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.store.appearance_rows import COLUMNS
    from strata.cloud.store.sqlite import SQLiteStore
    from strata.shared.config.cloud import CloudStoreConfig

    SQLiteStore(CloudStoreConfig(path=str(path)), CloudMetrics()).close()  # migrate
    t0 = time.perf_counter()
    conn = sqlite3.connect(path)
    # Written over the last 30 days, as a store's tracks accumulate (each refresh re-reads
    # only the last few seconds' writes: index.SLACK_NS).
    month = 30 * 86_400 * 10**9
    start, step = time.time_ns() - month, month // max(1, len(cameras))
    rows = (
        (cam, f"{1000 + i}-{i}", "person", MODEL, vs.shape[1], 5,
         vs[i].astype("<f2").tobytes(), 1000 + i, 2000 + i, start + i * step)
        for i, cam in enumerate(cameras)
    )  # fmt: skip
    marks = ", ".join("?" * len(COLUMNS.split(",")))
    conn.executemany(f"INSERT INTO track_appearance ({COLUMNS}) VALUES ({marks})", rows)
    conn.commit()
    conn.close()
    return time.perf_counter() - t0


def store_search(path: Path, cameras: list[str], queries: int, k: int) -> dict[str, Any]:
    """The endpoint's whole search over the store: first search (loads the index) and then
    per-search times."""
    from strata.cloud.identity.service import Searcher
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.store.sqlite import SQLiteStore
    from strata.shared.config.cloud import CloudStoreConfig

    store = SQLiteStore(CloudStoreConfig(path=str(path)), CloudMetrics())
    try:
        searcher = Searcher(store, CloudMetrics())
        t0 = time.perf_counter()
        searcher.search(cameras[0], "1000-0", k, -1.0, False)
        first_s = time.perf_counter() - t0
        rng = np.random.default_rng(2)
        ms = []
        for q in rng.integers(0, len(cameras), size=queries):
            t = time.perf_counter()
            found, searched = searcher.search(cameras[q], f"{1000 + q}-{q}", k, -1.0, False)
            ms.append((time.perf_counter() - t) * 1e3)
            assert len(found) == k and searched == len(cameras)
    finally:
        store.close()
    return {"first_search_s": round(first_s, 2), **_percentiles(ms)}


@dataclass(frozen=True, slots=True)
class Setup:
    """What one run measures."""

    tracks: int = 100_000
    dim: int = 512
    queries: int = 300
    k: int = 20
    cameras: int = 16
    seed: int = 0
    with_store: bool = True


def measure(setup: Setup | None = None) -> dict[str, Any]:
    """The figures as a dict (what --json writes; `strata bench identities` reuses it)."""
    s = setup or Setup()
    vs = embeddings(s.tracks, s.dim, s.seed)
    cams = [f"cam{i % s.cameras}" for i in range(s.tracks)]
    out: dict[str, Any] = {
        "tracks": s.tracks,
        "dim": s.dim,
        "k": s.k,
        "queries": s.queries,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average_1m": round(os.getloadavg()[0], 1),
        "index": index_search(vs, cams, s.queries, s.k),
    }
    if s.with_store:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "events.sqlite"
            out["store_fill_s"] = round(fill_store(path, vs, cams), 2)
            out["searcher"] = store_search(path, cams, s.queries, s.k)
    out["search_p99_ms"] = out.get("searcher", out["index"])["p99_ms"]
    return out


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the figures, write them to --json."""
    setup = Setup(
        args.tracks, args.dim, args.queries, args.k, args.cameras, args.seed, not args.no_store
    )
    got = measure(setup)
    got["command"] = getattr(args, "command_line", "")
    text = json.dumps(got, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
