"""The rules stage: every camera's rules engine, between tracking and publish.

`process(frame)` takes a camera's answered frames in capture order (frame.py says how the
tracking stage builds them) and returns the track events they cause (docs/events.md), for
the publish stage (a copy on the PUB socket) and the uplink (the durable path). It is also
a checkpoint part (edge/state/checkpoint.py: `name`, `snapshot`, `restore`): a camera that
moves to another edge goes on with its tracks' rule state, its counts and its event
sequence. `is_stationary` serves the looks stage (no cloud look at a parked car);
`needs_frames` the feedback path (ask the device for the next frames when a rule is about
to be decided).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from strata.shared.config.base import closest
from strata.shared.config.rules import CameraRules, RulesConfig
from strata.shared.contracts import events_pb2

from .camera import CameraEngine
from .camera_types import NS, EngineSettings, Need
from .frame import TrackFrame

log = logging.getLogger(__name__)

CountKind = Literal["crossings", "entries", "dwell", "occupancy", "events", "unseen"]


@dataclass(frozen=True, slots=True)
class RuleCount:
    """One count for a Prometheus collector: `kind` names the family; `rule` the line,
    zone, dwell rule or (events) the event type; `direction` only for crossings."""

    camera: str
    kind: CountKind
    rule: str
    direction: str
    label: str
    value: int


class RulesEngine:
    """Rules of every camera this edge serves; one thread calls it (the stage's)."""

    name = "rules"

    def __init__(
        self, cfg: RulesConfig, edge_id: str, wall_ns: Callable[[], int] = time.time_ns
    ) -> None:
        self.cfg = cfg
        self.settings = EngineSettings.of(cfg, edge_id)
        self._wall_ns = wall_ns
        self._cameras: dict[str, CameraEngine] = {}
        # Capture time of the first frame of any camera; the rules' cameras reported unseen.
        self._first_ns = 0
        self.unseen: list[str] = []

    def camera(self, camera_id: str) -> CameraEngine:
        """The camera's engine, created on first use (a camera without rules still gets
        lifecycle events and the stationary rule)."""
        eng = self._cameras.get(camera_id)
        if eng is None:
            # The edge learns its cameras as their frames come, and other edges may serve
            # the rest (the ring), so an unmatched rules camera is said, not refused.
            hint = self.cfg.unseen_hint(camera_id, self._cameras)
            if hint:
                log.warning("%s", hint)
            rules = self.cfg.cameras.get(camera_id, CameraRules())
            # Without a checkpoint the sequence starts at the wall clock in microseconds:
            # above anything an earlier life of this camera sent (docs/events.md).
            eng = CameraEngine(camera_id, rules, self.settings, self._wall_ns() // 1000)
            self._cameras[camera_id] = eng
        return eng

    def process(self, frame: TrackFrame) -> list[events_pb2.TrackEvent]:
        """The events one answered frame causes, in order."""
        events = self.camera(frame.camera_id).process(frame)
        self._check_unseen(frame.capture_ns)
        return events

    def _check_unseen(self, now_ns: int) -> None:
        """Issue 39: a rules camera that never sends a frame is refused in the open once the
        edge has served cameras for `unseen_camera_s`: an ERROR naming it (and the closest
        camera seen), and strata_edge_rules_camera_unseen{camera} (counts())."""
        if not self._first_ns:
            self._first_ns = now_ns
        if now_ns - self._first_ns < self.cfg.unseen_camera_s * NS:
            return
        unseen = self.cfg.unknown_cameras(self._cameras)
        for cam in unseen:
            if cam in self.unseen:
                continue
            guess = closest(cam, list(self._cameras))
            log.error(
                "rules.cameras.%s: refused: no frame of camera %r reached this edge in "
                "%.0fs of serving %s; its rules never fire here. Rules apply by exact camera "
                "id%s; if another edge serves %r, ignore this",
                cam,
                cam,
                self.cfg.unseen_camera_s,
                ", ".join(sorted(self._cameras)),
                f": did you mean {guess!r}?" if guess else "",
                cam,
            )
        self.unseen = unseen

    def is_stationary(self, camera_id: str, track_id: int) -> bool:
        """The track is stationary: no updates and no cloud looks until it moves."""
        eng = self._cameras.get(camera_id)
        return eng is not None and eng.is_stationary(track_id)

    def needs_frames(self, camera_id: str, horizon_s: float) -> Need:
        """Whether the camera's next frames (up to `horizon_s` ahead) decide a rule."""
        eng = self._cameras.get(camera_id)
        return eng.needs_frames(int(horizon_s * NS)) if eng is not None else Need()

    def counts(self) -> list[RuleCount]:
        """Every count of every camera (crossings, entries, dwell, occupancy, events)."""
        out: list[RuleCount] = []
        for cam, eng in self._cameras.items():
            c = eng.counts
            out += [RuleCount(cam, "crossings", *k, v) for k, v in c.crossings.items()]
            out += [RuleCount(cam, "entries", z, "", lb, v) for (z, lb), v in c.entries.items()]
            out += [RuleCount(cam, "dwell", d, "", lb, v) for (d, lb), v in c.dwell.items()]
            out += [
                RuleCount(cam, "occupancy", z, "", lb, v) for (z, lb), v in eng.occupancy().items()
            ]
            out += [RuleCount(cam, "events", t, "", "", v) for t, v in c.events.items()]
        out += [RuleCount(cam, "unseen", "", "", "", 1) for cam in self.unseen]
        return out

    def reconfigure(self, cfg: RulesConfig) -> None:
        """New rules (SIGHUP), keeping every track and the state of rules whose names stay."""
        self.cfg = cfg
        self.settings = EngineSettings.of(cfg, self.settings.edge_id)
        for cam, old in list(self._cameras.items()):
            eng = CameraEngine(cam, cfg.cameras.get(cam, CameraRules()), self.settings, 0)
            eng.restore(old.snapshot())
            self._cameras[cam] = eng

    # ---- checkpoint part -----------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Every camera's state, JSON-able, by camera id."""
        return {cam: eng.snapshot() for cam, eng in self._cameras.items()}

    def restore(self, data: Any) -> None:
        """Every camera of a snapshot (this edge's own, at start); all or nothing."""
        if not isinstance(data, dict):
            raise ValueError(f"rules checkpoint: a mapping by camera expected, got {type(data)}")
        engines = {str(cam): self._restored(str(cam), state) for cam, state in data.items()}
        self._cameras.update(engines)

    def restore_camera(self, camera_id: str, state: dict[str, Any]) -> None:
        """One camera's state (taken over from another edge's checkpoint)."""
        self._cameras[camera_id] = self._restored(camera_id, state)

    def _restored(self, camera_id: str, state: Any) -> CameraEngine:
        if not isinstance(state, dict):
            raise ValueError(f"rules checkpoint of camera {camera_id}: not a mapping")
        rules = self.cfg.cameras.get(camera_id, CameraRules())
        eng = CameraEngine(camera_id, rules, self.settings, 0)
        eng.restore(state)
        log.info(
            "rules state of camera %s restored: %d tracks, event sequence %d",
            camera_id,
            len(state.get("tracks", [])),
            eng.sequence,
        )
        return eng

    def snapshot_camera(self, camera_id: str) -> dict[str, Any] | None:
        """One camera's state (None: never seen)."""
        eng = self._cameras.get(camera_id)
        return eng.snapshot() if eng is not None else None
