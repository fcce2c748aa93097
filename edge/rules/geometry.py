"""Vectorised plane geometry for the rules: every function takes all tracks x all rules of a
kind at once, in frame-relative coordinates (0..1), image axes (y down).

Sides are half-open: a point exactly on a line counts on the side of negative cross
product, so a track that stops on the line and goes on is counted once, never zero or
twice times.
"""

from __future__ import annotations

import numpy as np
from strata.shared.config.rules import CameraRules

REFERENCE_POINTS = {
    # (fraction of the box's width from x1, fraction of its height from y1)
    "bottom_center": (0.5, 1.0),
    "center": (0.5, 0.5),
    "top_center": (0.5, 0.0),
}


def reference_points(
    boxes: np.ndarray, frame_size: tuple[int, int], where: tuple[float, float]
) -> np.ndarray:
    """(N, 4) source-pixel boxes -> (N, 2) points relative to the frame."""
    return np.asarray(boxes @ reference_matrix(frame_size, where))


def reference_matrix(frame_size: tuple[int, int], where: tuple[float, float]) -> np.ndarray:
    """(4, 2): boxes (N, 4) @ it = their reference points relative to the frame (one
    product a frame; the engine keeps it while the frame size stays)."""
    fx, fy = where
    w, h = frame_size
    m = np.zeros((4, 2), np.float64)
    m[0, 0], m[2, 0] = (1 - fx) / w, fx / w
    m[1, 1], m[3, 1] = (1 - fy) / h, fy / h
    return m


class Lines:
    """Directed segments a -> b, prepared so that every test is a matrix product.

    cross(b - a, p - a) = n . p - n . a with n = (-(b - a)_y, (b - a)_x): the side of all
    points against all lines is one product; so is where each line's ends lie relative to
    each track's step.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a = np.asarray(a, np.float64).reshape(-1, 2)
        self.b = np.asarray(b, np.float64).reshape(-1, 2)
        d = self.b - self.a
        self.normal_t = np.stack([-d[:, 1], d[:, 0]])  # (2, L)
        self.offset = (self.a * self.normal_t.T).sum(axis=1)  # (L,)
        self.ends_t = np.concatenate([self.a, self.b]).T  # (2, 2L)
        self.count = self.a.shape[0]

    def side(self, points: np.ndarray) -> np.ndarray:
        """(N, 2) -> (N, L) int64: +1 right of a -> b (y down), -1 left or on it."""
        return np.asarray(((points @ self.normal_t - self.offset) > 0) * 2 - 1)

    def cross(self, p0: np.ndarray, p1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps p0 -> p1 (S, 2) against every line: (crossed (S, L) bool, side of p0,
        side of p1). A proper intersection by the signs of cross products; sides are
        half-open (see the module docstring)."""
        s0, s1 = self.sides(p0, p1)
        return self.crossed(p0, p1, (s0, s1)), s0, s1

    def sides(self, p0: np.ndarray, p1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sides of both ends of every step, in one product."""
        n = p0.shape[0]
        s = self.right_of(p0, p1) * 2 - 1
        return s[:n], s[n:]

    def right_of(self, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
        """(2S, L) bool: p0's rows then p1's are right of each line (`sides` before the
        +-1). One product over both ends: its rounding depends on the operands' shapes,
        so every caller tests sides with this same product."""
        return np.asarray((np.concatenate([p0, p1]) @ self.normal_t - self.offset) > 0)

    def crossed(
        self, p0: np.ndarray, p1: np.ndarray, sides: tuple[np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """(S, L): the step changed side (`sides`, from `sides`) and the line's two ends
        lie on either side of the step (or on it)."""
        s0, s1 = sides
        k = self.count
        step = p1 - p0
        m = np.stack([-step[:, 1], step[:, 0]], axis=1)  # the step's normal
        ends = m @ self.ends_t - (m * p0).sum(axis=1)[:, None]  # (S, 2L)
        return np.asarray((s0 != s1) & (ends[:, :k] * ends[:, k:] <= 0))


def side(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, 2) points vs (L, 2)-(L, 2) directed lines -> (N, L): `Lines.side`."""
    return Lines(a, b).side(points)


def segments_cross(
    p0: np.ndarray, p1: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Track steps p0 -> p1 (S, 2) against line segments a -> b (L, 2): `Lines.cross`."""
    return Lines(a, b).cross(p0, p1)


class Polygons:
    """Several polygons as one edge list, for ray casting all points against all of them."""

    def __init__(self, polygons: list[np.ndarray]) -> None:
        self.count = len(polygons)
        if not polygons:
            self.p = np.zeros((0, 2))
            self.q = np.zeros((0, 2))
            self._inv = np.zeros(0)
            self._first = np.zeros(0, np.intp)
            return
        self.p = np.concatenate(polygons)  # (E, 2) edge starts
        self.q = np.concatenate([np.roll(p, -1, axis=0) for p in polygons])  # edge ends
        # Each polygon's edges are contiguous: where they start, for reduceat.
        self._first = np.cumsum([0] + [len(p) for p in polygons[:-1]]).astype(np.intp)
        dy = self.q[:, 1] - self.p[:, 1]
        # dx/dy per edge; a horizontal edge never straddles a ray, so its value is unused.
        self._inv = (self.q[:, 0] - self.p[:, 0]) / np.where(dy == 0, 1.0, dy)
        # Contiguous rows for the per-frame test: x where each edge meets a point's
        # horizontal is px0 + py * inv, with px0 = p.x - p.y * inv.
        self._py = self.p[None, :, 1].copy()
        self._qy = self.q[None, :, 1].copy()
        self._x0 = (self.p[:, 0] - self.p[:, 1] * self._inv)[None, :]

    def contains(self, points: np.ndarray) -> np.ndarray:
        """(N, 2) -> (N, Z) bool: even-odd ray casting towards +x over every edge at once."""
        if not self.count or not points.shape[0]:
            return np.zeros((points.shape[0], self.count), bool)
        px = points[:, 0:1]
        py = points[:, 1:2]
        straddle = (self._py > py) != (self._qy > py)  # (N, E)
        hits = straddle & (px < self._x0 + py * self._inv)
        # Each polygon's parity over its own (contiguous) edges.
        return np.asarray(np.logical_xor.reduceat(hits, self._first, axis=1))

    def distance(self, points: np.ndarray) -> np.ndarray:
        """(N, 2) -> (N, Z): distance from each point to each polygon's boundary."""
        if not self.count or not points.shape[0]:
            return np.full((points.shape[0], self.count), np.inf)
        d = segment_distance(points, self.p, self.q)  # (N, E)
        return np.asarray(np.minimum.reduceat(d, self._first, axis=1))


def segment_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, 2) points to (L, 2)-(L, 2) segments -> (N, L) Euclidean distances."""
    ab = b - a
    len2 = np.maximum((ab * ab).sum(axis=1), 1e-18)
    ap = points[:, None, :] - a[None, :, :]
    t = np.clip((ap * ab[None]).sum(axis=2) / len2[None], 0.0, 1.0)
    closest = a[None] + t[:, :, None] * ab[None]
    return np.asarray(np.hypot(*(points[:, None, :] - closest).transpose(2, 0, 1)))


def relative(points: list[tuple[float, float]], rules: CameraRules) -> np.ndarray:
    """Configured coordinates -> (K, 2) relative to the frame."""
    arr = np.asarray(points, np.float64).reshape(-1, 2)
    if rules.frame_size is not None:
        arr = arr / np.asarray(rules.frame_size, np.float64)
    return arr
