"""Which edge each camera of this agent sends to: the ring, made progressive.

The sender calls `update` a few times a second with the edges that are up. The router builds
the ring (rebuilt when membership changes, and each second while an edge warms up), asks it
for a target placement that keeps cameras where they are when it can, and lets the
rebalancer pick the moves to make now: cameras of an edge that is gone move at once, the
others a few per second.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from strata.shared.config.device import RoutingConfig
from strata.shared.ring import CameraKey, Member, Move, Rebalancer, Ring, RingParams

log = logging.getLogger(__name__)

# How often the ring is rebuilt while some edge is warming (its weight changes).
_WARM_REBUILD_S = 1.0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a camera is: its edge, or None while no edge is up."""

    camera_id: str
    edge: str | None


class CameraRouter:
    """Camera -> edge for one agent."""

    def __init__(self, cfg: RoutingConfig) -> None:
        self.cfg = cfg
        self.params = RingParams(
            vnodes_per_weight=cfg.vnodes_per_weight,
            load_factor=cfg.load_factor,
            warmup_s=cfg.warmup_s,
            ramp_s=cfg.ramp_s,
        )
        self.rebalancer = Rebalancer(cfg.moves_per_s)
        self._cams: dict[str, CameraKey] = {}
        self._current: dict[str, str | None] = {}
        self._ring: Ring | None = None
        self._ring_key: tuple[Member, ...] = ()
        self._ring_at = 0.0

    def add_camera(self, camera_id: str, model: str = "") -> None:
        """Place a new camera on the next update."""
        self._cams[camera_id] = CameraKey(camera_id, model or self.cfg.model)
        self._current.setdefault(camera_id, None)

    def remove_camera(self, camera_id: str) -> None:
        """Stop placing a camera."""
        self._cams.pop(camera_id, None)
        self._current.pop(camera_id, None)

    def edge_of(self, camera_id: str) -> str | None:
        """The camera's edge now (None: none up yet)."""
        return self._current.get(camera_id)

    def placement(self) -> dict[str, str | None]:
        """Every camera's edge now."""
        return dict(self._current)

    def ring(self, members: Sequence[Member], now: float) -> Ring:
        """The ring for these members (cached)."""
        key = tuple(sorted(members, key=lambda m: m.node_id))
        warming = any(m.warm_factor(now, self.params) < 1.0 for m in key)
        # A ring built during a warm-up holds the weights of then: rebuilt each second while
        # it lasts, and at once when it ends (else the last ramp's bounds stay in force).
        built_warm = self._ring is not None and any(f < 1.0 for f in self._ring.factors.values())
        if (
            self._ring is None
            or key != self._ring_key
            or (warming and now - self._ring_at >= _WARM_REBUILD_S)
            or (built_warm and not warming)
        ):
            self._ring = Ring(key, self.params, now)
            self._ring_key = key
            self._ring_at = now
        return self._ring

    def update(self, members: Sequence[Member], now: float, starting: bool = False) -> list[Move]:
        """Moves to make now for the edges that are up; applied to the placement.
        `starting`: the founding edges are still coming up; place without pacing."""
        if not self._cams:
            return []
        ring = self.ring(members, now)
        if not len(ring):
            return []  # nowhere to go: cameras keep their edge and their frames wait
        up = {m.node_id for m in members}
        sticky = {c: e for c, e in self._current.items() if e is not None and e in up}
        target = ring.assign(list(self._cams.values()), sticky)
        moves = self.rebalancer.step(self._current, target, up, now, starting)
        for m in moves:
            self._current[m.camera_id] = m.new
        return moves
