"""Camera-to-edge placement: a weighted consistent-hash ring with bounded loads.

Pure (no sockets, no clocks of its own: the caller passes `now`), so the device agent, the
benchmark and the tests all place cameras with the same code.

- Each edge owns `vnodes_per_weight * weight * warm-up factor` points on the ring (at least
  one); point i of an edge hashes `edge#i`, so a changing weight adds or removes points
  without moving the others.
- A camera hashes onto the ring and walks clockwise. Model affinity: it takes the first
  edge on its walk that announces its model; when no edge has it (or it asks for none),
  every edge is equally eligible and the walk order alone decides.
- Bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads",
  2018): an edge takes at most `ceil(load_factor * its fair share)` cameras; a camera whose
  first choice is full goes on to the next edge on its walk. Plain vnode hashing of 60
  cameras over 3 edges leaves the busiest edge about 20% over the mean; the bound keeps it at
  `load_factor`.
- Cold start: an edge that joined less than `warmup_s` ago counts at half its weight and
  takes at most half its fair share; over the next `ramp_s` it ramps to full.
- Progressive rehash (`Rebalancer`): a membership change yields a new target placement;
  cameras whose edge is gone move at once (they have nowhere to wait), the others move a
  few at a time (`moves_per_s`), never all at once.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

# A member that was there from the start: no warm-up.
FOUNDING = -math.inf


def ring_hash(key: str) -> int:
    """A stable 64-bit position (the same in every process, unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class RingParams:
    """How the ring is built and how fast it changes."""

    vnodes_per_weight: int = 160
    load_factor: float = 1.15
    warmup_s: float = 30.0
    ramp_s: float = 30.0

    def __post_init__(self) -> None:
        if self.vnodes_per_weight < 1:
            raise ValueError("vnodes_per_weight must be at least 1")
        if self.load_factor < 1.0:
            raise ValueError("load_factor must be at least 1")
        if self.warmup_s < 0 or self.ramp_s < 0:
            raise ValueError("warmup_s and ramp_s cannot be negative")


@dataclass(frozen=True, slots=True)
class Member:
    """An edge on the ring: its id (the endpoint), announced weight and models, join time."""

    node_id: str
    weight: float = 1.0
    models: frozenset[str] = field(default_factory=frozenset)
    joined_at: float = FOUNDING

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ValueError("a member needs an id")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ValueError(f"member {self.node_id}: weight must be positive, not {self.weight}")

    def warm_factor(self, now: float, params: RingParams) -> float:
        """0.5 during the warm-up, then a linear ramp to 1.0."""
        age = now - self.joined_at
        if age < params.warmup_s:
            return 0.5
        if params.ramp_s > 0 and age < params.warmup_s + params.ramp_s:
            return 0.5 + 0.5 * (age - params.warmup_s) / params.ramp_s
        return 1.0


@dataclass(frozen=True, slots=True)
class CameraKey:
    """A camera to place: its id and the model it asks for ("" : the edge's default)."""

    camera_id: str
    model: str = ""


class Ring:
    """The ring for one membership at one time; `assign` places a set of cameras."""

    def __init__(self, members: Iterable[Member], params: RingParams, now: float) -> None:
        self.params = params
        self.members = {m.node_id: m for m in members}
        self.factors = {m.node_id: m.warm_factor(now, params) for m in self.members.values()}
        points: list[tuple[int, str]] = []
        for m in self.members.values():
            n = max(1, round(params.vnodes_per_weight * m.weight * self.factors[m.node_id]))
            points.extend((ring_hash(f"{m.node_id}#{i}"), m.node_id) for i in range(n))
        points.sort()
        self._hashes = [p[0] for p in points]
        self._owners = [p[1] for p in points]

    def __len__(self) -> int:
        return len(self.members)

    def vnodes(self, node_id: str) -> int:
        """Points the member owns (for tests and metrics)."""
        return sum(1 for o in self._owners if o == node_id)

    def walk(self, key: str) -> Iterator[str]:
        """Distinct members in clockwise order from `key`'s position."""
        if not self._owners:
            return
        start = bisect.bisect_left(self._hashes, ring_hash(key))
        seen: set[str] = set()
        n = len(self._owners)
        for i in range(n):
            owner = self._owners[(start + i) % n]
            if owner not in seen:
                seen.add(owner)
                yield owner
                if len(seen) == len(self.members):
                    return

    def capacities(self, cameras: int) -> dict[str, int]:
        """Most cameras each member may take out of `cameras`.

        A warming member gets at most its warm factor times its fair share (fair: by full
        weight); the others share the rest, each up to `load_factor` times its part.
        """
        if not self.members:
            return {}
        total_w = sum(m.weight for m in self.members.values())
        warming = {k for k, f in self.factors.items() if f < 1.0}
        if len(warming) == len(self.members):
            warming = set()  # nobody to protect them from: place as equals
        caps: dict[str, int] = {}
        for k in warming:
            fair = cameras * self.members[k].weight / total_w
            caps[k] = math.floor(self.factors[k] * fair + 1e-9)
        rest = [m for k, m in self.members.items() if k not in warming]
        left = cameras - sum(caps.values())
        rest_w = sum(m.weight for m in rest)
        for m in rest:
            caps[m.node_id] = math.ceil(self.params.load_factor * left * m.weight / rest_w - 1e-9)
        return caps

    def assign(
        self, cameras: Sequence[CameraKey], current: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """camera id -> member id for every camera (empty when the ring is empty).

        Without `current`: each camera (in ring order) takes the first eligible edge on its
        walk with room. With `current` (the placement in force) as few cameras move as the
        bounds allow, and only toward better places, so repeated calls settle instead of
        flapping:
        1. a camera stays on its edge if the edge is still eligible for it;
        2. an edge below its fair share pulls the cameras whose first choice it is (a new
           edge fills this way, at most up to its bound while warming); then an edge over
           its bound keeps the cameras it is the best choice for and lets the rest go;
        3. whoever has no place walks to the first edge with room.
        """
        if not self.members:
            return {}
        current = current or {}
        caps = self.capacities(len(cameras))
        total_w = sum(m.weight for m in self.members.values())
        fair = {k: len(cameras) * m.weight / total_w for k, m in self.members.items()}
        # A fixed order (by position) makes the placement the same in every process.
        order = sorted(cameras, key=lambda c: (ring_hash(c.camera_id), c.camera_id))
        eligible: dict[str, list[str]] = {}
        for cam in order:
            walk = list(self.walk(cam.camera_id))
            having = [k for k in walk if cam.model and cam.model in self.members[k].models]
            eligible[cam.camera_id] = having or walk
        load = dict.fromkeys(self.members, 0)
        out: dict[str, str] = {}
        # 1. Stay where still eligible (bounds come after the pulls have made room).
        for cam in order:
            node = current.get(cam.camera_id)
            if node in eligible[cam.camera_id]:
                load[node] += 1
                out[cam.camera_id] = node
        # 2. Edges short of their share pull the cameras that prefer them.
        for cam in order:
            cid = cam.camera_id
            first = eligible[cid][0]
            if out.get(cid) == first:
                continue
            if load[first] < min(caps[first], math.floor(fair[first] + 1e-9)):
                if cid in out:
                    load[out[cid]] -= 1
                load[first] += 1
                out[cid] = first
        _let_go_over_bound(order, out, load, caps, eligible)
        # 3. The rest walk to the first edge with room.
        for cam in order:
            cid = cam.camera_id
            if cid in out:
                continue
            cands = eligible[cid]
            chosen = next((k for k in cands if load[k] < caps[k]), None)
            if chosen is None:
                # Every eligible edge is full (affinity narrowed the choice): the least
                # loaded one for its size takes it rather than leaving the camera unplaced.
                chosen = min(cands, key=lambda k: (load[k] / max(caps[k], 1), cands.index(k)))
            load[chosen] += 1
            out[cid] = chosen
        return out


def _let_go_over_bound(
    order: Sequence[CameraKey],
    out: dict[str, str],
    load: dict[str, int],
    caps: Mapping[str, int],
    eligible: Mapping[str, list[str]],
) -> None:
    """An edge over its bound lets go of the cameras it is the worst choice for (in place:
    they leave `out`, and `load` drops to the bound)."""
    by_node: dict[str, list[str]] = {}
    for cam in order:
        if cam.camera_id in out:
            by_node.setdefault(out[cam.camera_id], []).append(cam.camera_id)
    for node, cids in by_node.items():
        excess = load[node] - caps[node]
        if excess <= 0:
            continue
        cids.sort(key=lambda c: eligible[c].index(node))  # stable: ring order kept
        for cid in cids[len(cids) - excess :]:
            del out[cid]
        load[node] = caps[node]


@dataclass(frozen=True, slots=True)
class Move:
    """One camera changing edge; `forced` when its old edge is gone (failover)."""

    camera_id: str
    old: str | None
    new: str
    forced: bool


class Rebalancer:
    """Moves cameras toward a target placement at a bounded rate (progressive rehash)."""

    def __init__(self, moves_per_s: float, burst: int = 1) -> None:
        if moves_per_s <= 0 or burst < 1:
            raise ValueError("moves_per_s must be positive and burst at least 1")
        self.moves_per_s = moves_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._last: float | None = None

    def step(
        self,
        current: Mapping[str, str | None],
        target: Mapping[str, str],
        alive: Iterable[str],
        now: float,
        unpaced: bool = False,
    ) -> list[Move]:
        """The moves to make now. A camera with no edge, or whose edge is not alive, moves
        at once; the rest move when a token is free (lowest positions first), or all at
        once when `unpaced` (the agent is starting: nothing has settled yet)."""
        if self._last is not None:
            self._tokens = min(
                float(self.burst), self._tokens + (now - self._last) * self.moves_per_s
            )
        self._last = now
        live = set(alive)
        moves: list[Move] = []
        optional: list[str] = []
        for cam, new in target.items():
            old = current.get(cam)
            if old == new:
                continue
            if old is None or old not in live:
                moves.append(Move(cam, old, new, True))
            else:
                optional.append(cam)
        optional.sort(key=lambda c: (ring_hash(c), c))
        for cam in optional:
            if not unpaced:
                if self._tokens < 1.0:
                    break
                self._tokens -= 1.0
            moves.append(Move(cam, current.get(cam), target[cam], False))
        return moves


def loads(placement: Mapping[str, str]) -> dict[str, int]:
    """Cameras per member in a placement."""
    out: dict[str, int] = {}
    for node in placement.values():
        out[node] = out.get(node, 0) + 1
    return out


__all__ = [
    "FOUNDING",
    "CameraKey",
    "Member",
    "Move",
    "Rebalancer",
    "Ring",
    "RingParams",
    "loads",
    "ring_hash",
]
