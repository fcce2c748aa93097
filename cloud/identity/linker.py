"""Link tracks of different cameras into identities: the pure function the cloud's linker
and `strata bench identities` share.

Each track brings its appearance (an L2-normalised embedding, the average of several crops
on the edge), its camera and the capture times it was first and last seen. Two tracks may
link when they are of different cameras that are neighbours (all cameras are, when none are
configured), their times are at most `window_s` apart (overlapping lives are 0 apart: views
that overlap see the same person at once), and their cosine similarity is at least
`threshold`. Within each camera pair the assignment is one-to-one (a person leaves a view
once per pass), chosen greedily by similarity, best first, over both directions at once, so
a track takes its best partner unless that partner is someone's better match. Accepted links
then join identities best first, and a link that would put two tracks of one camera that
were alive at the same time into one identity (two people) is refused.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class TrackLook:
    """One track as the linker sees it."""

    key: Hashable
    camera_id: str
    start_ns: int
    end_ns: int
    vector: np.ndarray  # L2-normalised float32


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """When two tracks are the same person (cloud.identity)."""

    threshold: float = 0.9  # cloud.identity.threshold's default (its comment: why)
    window_s: float = 60.0
    # camera -> the cameras a person can walk to from it (symmetric); empty: every pair.
    neighbours: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def pair_allowed(self, a: str, b: str) -> bool:
        """Whether tracks of cameras a and b may link."""
        if a == b:
            return False
        if not self.neighbours:
            return True
        return b in self.neighbours.get(a, ()) or a in self.neighbours.get(b, ())


@dataclass(frozen=True, slots=True)
class Link:
    """Two tracks judged the same person, and how alike they look."""

    a: Hashable
    b: Hashable
    similarity: float


def gap_ns(x: TrackLook, y: TrackLook) -> int:
    """Time between two tracks' lives (0 when they overlap)."""
    return max(0, max(x.start_ns, y.start_ns) - min(x.end_ns, y.end_ns))


def candidate_links(tracks: Sequence[TrackLook], settings: LinkSettings) -> list[Link]:
    """One-to-one links per camera pair, gated by time and threshold, best first."""
    by_camera: dict[str, list[TrackLook]] = {}
    for t in tracks:
        by_camera.setdefault(t.camera_id, []).append(t)
    cameras = sorted(by_camera)
    window = int(settings.window_s * NS)
    links: list[Link] = []
    for i, ca in enumerate(cameras):
        for cb in cameras[i + 1 :]:
            if settings.pair_allowed(ca, cb):
                links += _pair_links(by_camera[ca], by_camera[cb], settings.threshold, window)
    links.sort(key=lambda lk: -lk.similarity)
    return links


def _pair_links(
    xs: Sequence[TrackLook], ys: Sequence[TrackLook], threshold: float, window_ns: int
) -> list[Link]:
    """Greedy one-to-one assignment between two cameras' tracks, best similarity first."""
    vx = np.stack([t.vector for t in xs]).astype(np.float32)
    vy = np.stack([t.vector for t in ys]).astype(np.float32)
    sim = vx @ vy.T
    sx = np.array([t.start_ns for t in xs], dtype=np.int64)[:, None]
    ex = np.array([t.end_ns for t in xs], dtype=np.int64)[:, None]
    sy = np.array([t.start_ns for t in ys], dtype=np.int64)[None, :]
    ey = np.array([t.end_ns for t in ys], dtype=np.int64)[None, :]
    gap = np.maximum(0, np.maximum(sx, sy) - np.minimum(ex, ey))
    ok = (sim >= threshold) & (gap <= window_ns)
    rows, cols = np.nonzero(ok)
    if rows.size == 0:
        return []
    order = np.argsort(-sim[rows, cols], kind="stable")
    used_x: set[int] = set()
    used_y: set[int] = set()
    out: list[Link] = []
    for k in order:
        r, c = int(rows[k]), int(cols[k])
        if r in used_x or c in used_y:
            continue
        used_x.add(r)
        used_y.add(c)
        out.append(Link(xs[r].key, ys[c].key, float(sim[r, c])))
    return out


class _Groups:
    """Union-find over track keys that refuses a merge putting two tracks of one camera that
    were alive at once into one group."""

    def __init__(self, tracks: Iterable[TrackLook]) -> None:
        self.parent: dict[Hashable, Hashable] = {}
        self.members: dict[Hashable, list[TrackLook]] = {}
        for t in tracks:
            self.parent[t.key] = t.key
            self.members[t.key] = [t]

    def root(self, k: Hashable) -> Hashable:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def join(self, a: Hashable, b: Hashable) -> bool:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return True
        for x in self.members[ra]:
            for y in self.members[rb]:
                if x.camera_id == y.camera_id and gap_ns(x, y) == 0:
                    return False
        if len(self.members[ra]) < len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.members[ra] += self.members.pop(rb)
        return True


def link(
    tracks: Sequence[TrackLook], settings: LinkSettings | None = None
) -> list[tuple[Hashable, ...]]:
    """The identities among `tracks`: groups of two or more keys (each in start-time order),
    ordered by their first track's start. A track in no group matched no other camera."""
    settings = settings or LinkSettings()
    if len(tracks) < 2:
        return []
    groups = _Groups(tracks)
    for lk in candidate_links(tracks, settings):
        groups.join(lk.a, lk.b)
    out = [
        tuple(t.key for t in sorted(m, key=lambda t: (t.start_ns, t.camera_id)))
        for m in groups.members.values()
        if len(m) > 1
    ]
    start = {t.key: t.start_ns for t in tracks}
    out.sort(key=lambda g: start[g[0]])
    return out
