"""Helpers of the identity tests: people as appearance embeddings, their track events."""

from __future__ import annotations

from typing import Any

import numpy as np
from cloud_helpers import track_event
from strata.shared.contracts import events_pb2

DIM = 512
MODEL = "osnet_x0_25_msmt17"
SECOND = 1_000_000_000
DAY_NS = 86_400 * SECOND


def people(n: int, seed: int = 0) -> np.ndarray:
    """n people's appearances: random unit vectors (nearly orthogonal in 512 dimensions)."""
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def seen(person: np.ndarray, noise: float, seed: int) -> np.ndarray:
    """One track's embedding of a person: the person plus noise of norm `noise`, normalised
    (cosine to the person about 1 / sqrt(1 + noise^2))."""
    n = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    v = person + noise * n / np.linalg.norm(n)
    return (v / np.linalg.norm(v)).astype(np.float32)


def appearance(v: np.ndarray, samples: int = 5, dim: int | None = None) -> Any:
    """The contract's Appearance of a float32 vector."""
    return events_pb2.Appearance(
        model=MODEL,
        dim=DIM if dim is None else dim,
        float16=v.astype("<f2").tobytes(),
        samples=samples,
    )


def life(
    camera: str, track: tuple[int, int], seq: int, start_s: float, end_s: float, v: np.ndarray
) -> list[Any]:
    """A track's new and end events (both with its appearance), captured at start_s and end_s
    seconds; sequences seq and seq + 1 (per camera, increasing)."""
    t0, t1 = int(start_s * SECOND), int(end_s * SECOND)
    new = track_event(
        seq, camera, track, "new", track_sequence=0, capture_ns=t0, appearance=appearance(v, 3)
    )
    end = track_event(
        seq + 1, camera, track, "end", track_sequence=1, capture_ns=t1, appearance=appearance(v)
    )
    end.after.start_time, end.after.end_time = start_s, end_s
    return [new, end]
