"""What a camera's rules engine (edge/rules/camera.py) is set with, what it counts, and
what it tells other stages about its next frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.shared.config.rules import RulesConfig

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What every camera's engine shares (from `rules:` and the edge)."""

    edge_id: str = ""
    path_points: int = 32
    end_after_ns: int = 10 * NS
    near_margin: float = 0.03
    near_dwell_ns: int = NS

    @classmethod
    def of(cls, cfg: RulesConfig, edge_id: str) -> EngineSettings:
        """From the config section."""
        return cls(
            edge_id=edge_id,
            path_points=cfg.path_points,
            end_after_ns=int(cfg.end_after_s * NS),
            near_margin=cfg.near_margin,
            near_dwell_ns=int(cfg.near_dwell_s * NS),
        )


@dataclass(frozen=True, slots=True)
class Need:
    """Why a camera's next frames matter to its rules (all false: they do not)."""

    line: bool = False
    zone: bool = False
    dwell: bool = False

    def __bool__(self) -> bool:
        return self.line or self.zone or self.dwell


@dataclass(slots=True)
class CameraCounts:
    """Counts of one camera, by (rule, direction or "", label); events by type name."""

    crossings: dict[tuple[str, str, str], int] = field(default_factory=dict)
    entries: dict[tuple[str, str], int] = field(default_factory=dict)
    dwell: dict[tuple[str, str], int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    # Tracks that ended before they were confirmed (their results were never sent).
    unconfirmed: int = 0
    # Frames older than the last one seen (not evaluated).
    out_of_order: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON-able (the checkpoint)."""
        return {
            "crossings": [[*k, v] for k, v in self.crossings.items()],
            "entries": [[*k, v] for k, v in self.entries.items()],
            "dwell": [[*k, v] for k, v in self.dwell.items()],
            "events": self.events,
            "unconfirmed": self.unconfirmed,
            "out_of_order": self.out_of_order,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CameraCounts:
        """Inverse of to_json."""
        return cls(
            {(str(a), str(b), str(c)): int(n) for a, b, c, n in d.get("crossings", [])},
            {(str(a), str(b)): int(n) for a, b, n in d.get("entries", [])},
            {(str(a), str(b)): int(n) for a, b, n in d.get("dwell", [])},
            {str(k): int(v) for k, v in d.get("events", {}).items()},
            int(d.get("unconfirmed", 0)),
            int(d.get("out_of_order", 0)),
        )


def bump(d: dict[Any, int], key: Any) -> None:
    d[key] = d.get(key, 0) + 1
