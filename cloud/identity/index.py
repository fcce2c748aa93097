"""Search by example (issue 42): the stored tracks most like one track, from an in-memory
matrix of their L2-normalised float32 embeddings, one matrix per embedding model.

A search is one matrix-vector product (BLAS) and a partial sort: at 100,000 tracks of 512
values the matrix is 205 MB and a search reads it once (docs/cloud.md gives the measured
p99). The index follows the store: before a search it reads the appearances written since
its last read (`updated_ns`, indexed), so a track stored by any replica is found; a track
the store no longer has (retention) is dropped when a search meets it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..store import appearance_rows
from ..store.appearance_rows import AppearanceRow

Select = Callable[[str, Any], list[tuple[Any, ...]]]
# Rows read from the store per refresh query.
REFRESH_BATCH = 5000
# How far back each refresh reads again (commits of other replicas that came late).
SLACK_NS = 5_000_000_000


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked result: the track's appearance id and its cosine similarity."""

    appearance_id: int
    similarity: float


class _ModelMatrix:
    """The vectors of one model, grown by doubling; a removed row is zeroed (never matches)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.vectors = np.zeros((1024, dim), dtype=np.float32)
        self.ids = np.full(1024, -1, dtype=np.int64)
        self.cameras = np.zeros(1024, dtype=np.int32)
        self.n = 0
        self.row: dict[int, int] = {}

    def put(self, appearance_id: int, camera: int, v: np.ndarray) -> None:
        i = self.row.get(appearance_id)
        if i is None:
            if self.n == len(self.ids):
                self._grow()
            i = self.n
            self.n += 1
            self.row[appearance_id] = i
        self.vectors[i] = v
        self.ids[i] = appearance_id
        self.cameras[i] = camera

    def _grow(self) -> None:
        size = 2 * len(self.ids)
        vectors = np.zeros((size, self.dim), dtype=np.float32)
        vectors[: self.n] = self.vectors[: self.n]
        ids = np.full(size, -1, dtype=np.int64)
        ids[: self.n] = self.ids[: self.n]
        cams = np.zeros(size, dtype=np.int32)
        cams[: self.n] = self.cameras[: self.n]
        self.vectors, self.ids, self.cameras = vectors, ids, cams

    def remove(self, appearance_id: int) -> None:
        i = self.row.pop(appearance_id, None)
        if i is not None:
            self.vectors[i] = 0.0
            self.ids[i] = -1

    def search(self, v: np.ndarray, k: int, skip_camera: int) -> list[Hit]:
        n = self.n
        if n == 0 or k <= 0:
            return []
        sims = self.vectors[:n] @ v
        if len(self.row) < n:  # some rows were removed
            sims[self.ids[:n] < 0] = -2.0
        if skip_camera >= 0:
            sims[self.cameras[:n] == skip_camera] = -2.0
        k = min(k, n)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [Hit(int(self.ids[i]), float(sims[i])) for i in top if sims[i] > -2.0]


class SimilarityIndex:
    """Every stored appearance, searchable by cosine similarity; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, _ModelMatrix] = {}
        self._cameras: dict[str, int] = {}
        # Where the last refresh stopped: (updated_ns, appearance_id) read so far.
        self._since_ns = 0

    def __len__(self) -> int:
        with self._lock:
            return sum(len(m.row) for m in self._models.values())

    def size(self, model: str) -> int:
        """How many tracks of `model` the index holds."""
        with self._lock:
            m = self._models.get(model)
            return 0 if m is None else len(m.row)

    def _camera(self, camera_id: str) -> int:
        return self._cameras.setdefault(camera_id, len(self._cameras))

    def add(self, row: AppearanceRow) -> None:
        """Put (or replace) one track's vector."""
        with self._lock:
            self._add(row)

    def _add(self, row: AppearanceRow) -> None:
        m = self._models.get(row.model)
        if m is None or m.dim != row.vector.shape[0]:
            if m is not None:  # a model name reused with another size: the newer wins
                for aid in list(m.row):
                    m.remove(aid)
            m = self._models[row.model] = _ModelMatrix(int(row.vector.shape[0]))
        m.put(row.appearance_id, self._camera(row.camera_id), row.vector)

    def add_matrix(self, model: str, ids: np.ndarray, cameras: list[str], vs: np.ndarray) -> None:
        """Bulk load (benchmarks): ids[i] of cameras[i] has the L2-normalised row vs[i]."""
        with self._lock:
            m = self._models.setdefault(model, _ModelMatrix(int(vs.shape[1])))
            for aid, cam, v in zip(ids, cameras, vs, strict=True):
                m.put(int(aid), self._camera(cam), v)

    def remove(self, appearance_id: int) -> None:
        """Forget a track (the store no longer has it)."""
        with self._lock:
            for m in self._models.values():
                m.remove(appearance_id)

    def refresh(self, select: Select, ph: str) -> int:
        """Read the appearances written since the last refresh (and the last SLACK_NS before
        it: a transaction of another replica may commit a little after its rows' time);
        how many rows were read."""
        read = 0
        sql = appearance_rows.updated_since_sql(ph)
        with self._lock:
            cursor = (max(0, self._since_ns - SLACK_NS), 0)
            while True:
                rows = select(sql, (*cursor, REFRESH_BATCH))
                for r in rows:
                    self._add(appearance_rows.from_row(r))
                read += len(rows)
                if rows:
                    cursor = (int(rows[-1][-1]), int(rows[-1][0]))
                    self._since_ns = max(self._since_ns, cursor[0])
                if len(rows) < REFRESH_BATCH:
                    return read

    def search(
        self, model: str, v: np.ndarray, k: int, skip_camera: str = ""
    ) -> tuple[list[Hit], int]:
        """The k most similar tracks of `model` to `v` (best first), leaving out
        `skip_camera`'s, and how many tracks were searched."""
        with self._lock:
            m = self._models.get(model)
            if m is None or m.dim != v.shape[0]:
                return [], 0
            cam = self._cameras.get(skip_camera, -1) if skip_camera else -1
            return m.search(v.astype(np.float32, copy=False), k, cam), len(m.row)
