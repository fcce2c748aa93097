"""One camera's rules as arrays, relative to the frame: what the hot path reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from strata.shared.config.rules import CameraRules

from .geometry import REFERENCE_POINTS, Lines, Polygons, relative

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class LabelFilter:
    """Which labels each of K rules accepts (an empty set: every label)."""

    sets: tuple[frozenset[str], ...]

    def mask(self, labels: Sequence[str], n_classes: int) -> np.ndarray:
        """(C, K) bool: class id c passes rule k; class ids beyond `labels` pass only
        rules without a label filter."""
        out = np.ones((n_classes, len(self.sets)), bool)
        for k, allowed in enumerate(self.sets):
            if allowed:
                out[:, k] = [c < len(labels) and labels[c] in allowed for c in range(n_classes)]
        return out


@dataclass(frozen=True, slots=True)
class CompiledRules:
    """`CameraRules` prepared for the engine: names, geometry and limits as arrays."""

    cfg: CameraRules
    reference: tuple[float, float]
    zone_names: tuple[str, ...]
    polygons: Polygons
    zone_labels: LabelFilter
    zone_min_score: np.ndarray  # (Z,)
    zone_min_area: np.ndarray  # (Z,) fraction of the frame
    zone_enter: np.ndarray  # (Z,) frames
    zone_leave: np.ndarray  # (Z,) frames
    zone_occupancy: np.ndarray  # (Z,) bool
    zone_score_filter: bool  # some zone has a min_score (a filter nobody set costs nothing)
    zone_area_filter: bool  # some zone has a min_area
    zone_label_filter: bool  # some zone has labels
    line_names: tuple[str, ...]
    lines: Lines
    line_in: np.ndarray  # (L,) int8: the side (as geometry.side) called "in"
    line_labels: LabelFilter
    line_min_score: np.ndarray  # (L,)
    line_debounce_ns: np.ndarray  # (L,) int64
    dwell_names: tuple[str, ...]
    dwell_zone: np.ndarray  # (D,) zone index
    dwell_ns: np.ndarray  # (D,) int64
    dwell_labels: LabelFilter
    min_dwell_ns: int  # the shortest dwell limit (none: 0)

    @classmethod
    def of(cls, cfg: CameraRules) -> CompiledRules:
        """Compile; the config was validated when it loaded."""
        frame_area = float(np.prod(cfg.frame_size)) if cfg.frame_size else 1.0
        polys = [relative(z.points, cfg) for z in cfg.zones]
        lines = [relative(ln.points, cfg) for ln in cfg.lines]
        zone_index = {z.name: i for i, z in enumerate(cfg.zones)}
        min_score = np.array([z.min_score for z in cfg.zones], np.float64)
        min_area = np.array([z.min_area / frame_area for z in cfg.zones], np.float64)
        line_a = np.array([ln[0] for ln in lines]).reshape(-1, 2)
        line_b = np.array([ln[1] for ln in lines]).reshape(-1, 2)
        return cls(
            cfg=cfg,
            reference=REFERENCE_POINTS[cfg.reference_point],
            zone_names=tuple(z.name for z in cfg.zones),
            polygons=Polygons(polys),
            zone_labels=LabelFilter(tuple(frozenset(z.labels) for z in cfg.zones)),
            zone_min_score=min_score,
            zone_min_area=min_area,
            zone_enter=np.array([z.enter_frames for z in cfg.zones], np.int64),
            zone_leave=np.array([z.leave_frames for z in cfg.zones], np.int64),
            zone_occupancy=np.array([z.occupancy for z in cfg.zones], bool),
            zone_score_filter=bool(min_score.any()),
            zone_area_filter=bool(min_area.any()),
            zone_label_filter=any(z.labels for z in cfg.zones),
            line_names=tuple(ln.name for ln in cfg.lines),
            lines=Lines(line_a, line_b),
            # Left of a -> b has a negative cross product in image axes (y down).
            line_in=np.array([-1 if ln.in_side == "left" else 1 for ln in cfg.lines], np.int8),
            line_labels=LabelFilter(tuple(frozenset(ln.labels) for ln in cfg.lines)),
            line_min_score=np.array([ln.min_score for ln in cfg.lines], np.float64),
            line_debounce_ns=np.array([int(ln.debounce_s * _NS) for ln in cfg.lines], np.int64),
            dwell_names=tuple(d.name for d in cfg.dwell),
            dwell_zone=np.array([zone_index[d.zone] for d in cfg.dwell], np.intp),
            dwell_ns=np.array([int(d.seconds * _NS) for d in cfg.dwell], np.int64),
            dwell_labels=LabelFilter(tuple(frozenset(d.labels) for d in cfg.dwell)),
            min_dwell_ns=min((int(d.seconds * _NS) for d in cfg.dwell), default=0),
        )

    @property
    def n_zones(self) -> int:
        return len(self.zone_names)

    @property
    def n_lines(self) -> int:
        return len(self.line_names)

    @property
    def n_dwell(self) -> int:
        return len(self.dwell_names)
