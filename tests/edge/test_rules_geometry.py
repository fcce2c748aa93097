"""The vectorised geometry against plain per-pair references (and OpenCV's point test)."""

import cv2
import numpy as np
from strata.edge.rules.geometry import Polygons, segment_distance, segments_cross, side


def _cross(o: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    return float((a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]))


def test_segments_cross_matches_a_pairwise_reference() -> None:
    rng = np.random.default_rng(1)
    p0, p1 = rng.random((200, 2)), rng.random((200, 2))
    a, b = rng.random((7, 2)), rng.random((7, 2))
    crossed, s0, s1 = segments_cross(p0, p1, a, b)
    for i in range(200):
        for k in range(7):
            d1 = _cross(a[k], b[k], p0[i])
            d2 = _cross(a[k], b[k], p1[i])
            d3 = _cross(p0[i], p1[i], a[k])
            d4 = _cross(p0[i], p1[i], b[k])
            assert crossed[i, k] == (d1 * d2 < 0 and d3 * d4 < 0)
            assert s1[i, k] == (1 if d2 > 0 else -1) and s0[i, k] == (1 if d1 > 0 else -1)
    assert crossed.sum() > 10  # the sample does exercise crossings


def test_a_point_on_the_line_counts_on_one_side_only() -> None:
    a, b = np.array([[0.0, 0.5]]), np.array([[1.0, 0.5]])
    # Above the line, onto it, then below: one crossing in total, never two or none.
    path = np.array([[0.5, 0.4], [0.5, 0.5], [0.5, 0.6]])
    crossed, _, _ = segments_cross(path[:-1], path[1:], a, b)
    assert int(crossed.sum()) == 1
    # Left of a -> b (rightwards, y down) is above.
    assert side(np.array([[0.5, 0.1]]), a, b)[0, 0] == -1


def test_polygons_contain_as_opencv_says() -> None:
    rng = np.random.default_rng(2)
    polys = [
        np.array([[0.1, 0.1], [0.6, 0.15], [0.5, 0.7], [0.3, 0.4], [0.05, 0.6]]),
        np.array([[0.5, 0.5], [0.95, 0.5], [0.95, 0.95], [0.5, 0.95]]),
        np.array([[0.2, 0.8], [0.4, 0.6], [0.45, 0.99]]),
    ]
    pts = rng.random((500, 2))
    got = Polygons(polys).contains(pts)
    for k, poly in enumerate(polys):
        contour = (poly * 10_000).astype(np.float32).reshape(-1, 1, 2)
        for i, (x, y) in enumerate(pts):
            d = cv2.pointPolygonTest(contour, (float(x * 10_000), float(y * 10_000)), True)
            if abs(d) > 1:  # away from the boundary, where both agree by definition
                assert got[i, k] == (d > 0), (i, k)
    assert got.any() and not got.all()


def test_distances_to_segments_and_polygon_edges() -> None:
    rng = np.random.default_rng(3)
    pts, a, b = rng.random((50, 2)), rng.random((4, 2)), rng.random((4, 2))
    d = segment_distance(pts, a, b)
    for i in range(50):
        for k in range(4):
            t = np.linspace(0, 1, 2001)[:, None]
            brute = np.min(np.hypot(*(a[k] + t * (b[k] - a[k]) - pts[i]).T))
            assert abs(d[i, k] - brute) < 1e-3
    square = Polygons([np.array([[0.2, 0.2], [0.8, 0.2], [0.8, 0.8], [0.2, 0.8]])])
    np.testing.assert_allclose(
        square.distance(np.array([[0.5, 0.5], [0.9, 0.5]]))[:, 0], [0.3, 0.1]
    )
