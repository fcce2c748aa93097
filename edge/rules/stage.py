"""The rules stage of the edge: between tracking and publish (strata.edge.tracking.handoff).

Every answered frame of a camera passes it in capture order: a detected one (`__call__`)
and one the device dropped, answered by tracking's prediction (`answered`), so a line
crossed between two kept frames is found on the predicted positions. It builds the
`TrackFrame` (edge/rules/frame.py) from tracking's `TrackedBoxes`, runs the `RulesEngine`
and hands the frame forward with its events (publish sends a copy on the PUB socket and
the durable copy to the uplink). After a detected frame it asks the camera's device for
the next frames when a rule is about to be decided (`needs_frames`, on the next ack).

The engine is called from the worker thread (frames, looks), the ingest thread (a
takeover), a scrape (/metrics) and the main thread (SIGHUP): one lock around it. Rules
change (`reconfigure`) between two frames, so no frame is dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from strata.edge.tracking.handoff import AnsweredFrame, TrackedFrame
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.rules import RulesConfig, check_labels
from strata.shared.contracts import events_pb2, frame_pb2

from .camera_types import Need
from .engine import RuleCount, RulesEngine
from .frame import TrackFrame

log = logging.getLogger(__name__)

# (session, camera, why): ask the camera's device for its next frames (on the next ack);
# why: "line", "zone", "dwell".
AskNext = Callable[[int, str, Sequence[str]], None]

# (session, camera, track id): the track's appearance embedding for its lifecycle events
# (None: appearance is off for the camera, or the track has none yet).
AppearanceOf = Callable[[int, str, int], events_pb2.Appearance | None]
# Lifecycle events: the ones that carry the track's appearance (issue 42).
_LIFECYCLE = (
    events_pb2.TRACK_EVENT_TYPE_NEW,
    events_pb2.TRACK_EVENT_TYPE_UPDATE,
    events_pb2.TRACK_EVENT_TYPE_END,
)

# The horizon of `needs_frames`: the gap to the camera's previous kept frame, at most this.
MAX_HORIZON_S = 2.0
# The ask budget's bucket: a camera starts with this many asks and saves up to it.
ASK_BURST = 3.0


@dataclass(frozen=True, slots=True)
class _Answered:
    """What the stage needs of one answered frame, detected or predicted."""

    header: frame_pb2.FrameHeader
    tracked: TrackedBoxes
    receive_ns: int
    kept: bool


class RulesStage:
    """A `TrackedStage` running the rules of every camera; also the rules checkpoint part
    (`name`, `snapshot`, `restore`, `take_over`)."""

    name = "rules"

    def __init__(
        self,
        engine: RulesEngine,
        labels: Sequence[str],
        ask_next: AskNext,
        refused: Callable[[str], None] = lambda _camera: None,
    ) -> None:
        self.engine = engine
        # Per camera, the asks it may still make (rules.ask_budget per answered frame).
        self._tokens: dict[str, float] = {}
        self.refused = refused
        # The model's labels, one tuple every frame shares (the engine caches by identity).
        self.labels = tuple(labels)
        self.ask_next = ask_next
        self.appearance_of: AppearanceOf | None = None
        self._lock = threading.Lock()
        # Capture time of each camera's last kept frame (the horizon of needs_frames).
        self._kept_ns: dict[str, int] = {}

    # ---- the stage (worker thread) --------------------------------------------------------

    def __call__(self, frame: TrackedFrame) -> TrackedFrame:
        if frame.tracked is None or frame.predicted:
            return frame  # no tracks, or a cached result again (GPU pressure 4)
        h = frame.decoded.header
        events = self._run(_Answered(h, frame.tracked, frame.decoded.frame.receive_ns, True))
        return replace(frame, events=frame.events + events) if events else frame

    def answered(self, frame: AnsweredFrame) -> AnsweredFrame:
        a = frame.answer
        events = self._run(_Answered(a.header, a.boxes, a.receive_ns, False))
        return replace(frame, events=frame.events + events) if events else frame

    def _run(self, a: _Answered) -> tuple[events_pb2.TrackEvent, ...]:
        f = self.track_frame(a)
        if f is None:
            return ()
        with self._lock:
            events = self.engine.process(f)
            need = self._need(f) if a.kept else None
            tokens = self._tokens.get(f.camera_id, ASK_BURST) + self.engine.cfg.ask_budget
            granted = bool(need) and tokens >= 1.0
            self._tokens[f.camera_id] = min(ASK_BURST, tokens - 1.0 if granted else tokens)
        if need and not granted:
            # Over budget: the cascade's spacing decides (a rule result may be predicted).
            self.refused(f.camera_id)
        if granted:
            why = [k for k in ("line", "zone", "dwell") if getattr(need, k)]
            self.ask_next(a.header.session_id, f.camera_id, why)
        if self.appearance_of is not None:
            for e in events:
                if e.type in _LIFECYCLE:
                    look = self.appearance_of(a.header.session_id, e.camera_id, e.track_id)
                    if look is not None:
                        e.appearance.CopyFrom(look)
        return tuple(events)

    def _need(self, f: TrackFrame) -> Need:
        """Whether the camera's next frames decide a rule (lock held)."""
        last = self._kept_ns.get(f.camera_id)
        self._kept_ns[f.camera_id] = f.capture_ns
        if last is None or f.capture_ns <= last:
            return Need()
        horizon_s = min((f.capture_ns - last) / 1e9, MAX_HORIZON_S)
        return self.engine.needs_frames(f.camera_id, horizon_s)

    def track_frame(self, a: _Answered) -> TrackFrame | None:
        """The engine's view of one answered frame (None: no frame size to scale by)."""
        h, t = a.header, a.tracked
        size = (h.source_width or h.width, h.source_height or h.height)
        if not size[0] or not size[1]:
            return None
        keep = t.track_ids != 0
        confirmed = t.confirmed_mask()
        observed = np.zeros(len(t), bool) if t.predicted else t.uncertainty == 0
        if not keep.all():
            confirmed, observed = confirmed[keep], observed[keep]
        return TrackFrame(
            camera_id=h.camera_id,
            # The rules' clock: capture time, else (an agent that sends none) receipt.
            capture_ns=h.capture_ns or a.receive_ns,
            frame_size=size,
            track_ids=t.track_ids[keep],
            boxes=t.boxes[keep],
            scores=t.scores[keep],
            class_ids=t.class_ids[keep],
            confirmed=confirmed,
            observed=observed,
            labels=self.labels,
            ended=t.ended,
        )

    # ---- questions from other stages ------------------------------------------------------

    def is_stationary(self, camera_id: str, track_id: int) -> bool:
        """The looks stage: no cloud look at a parked object."""
        with self._lock:
            return self.engine.is_stationary(camera_id, track_id)

    def counts(self) -> list[RuleCount]:
        """Every camera's counts (/metrics)."""
        with self._lock:
            return self.engine.counts()

    def reconfigure(self, cfg: RulesConfig) -> None:
        """New rules (SIGHUP), between two frames. UnknownLabelError (nothing changed)
        when they name a label the model lacks."""
        check_labels(cfg, self.labels)
        with self._lock:
            self.engine.reconfigure(cfg)

    # ---- checkpoint part ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.engine.snapshot()

    def restore(self, data: Any) -> str:
        with self._lock:
            self.engine.restore(data)
        return f"{len(data)} camera(s)"

    def take_over(self, data: Any, camera: str, peer: str) -> int:
        """A camera moved here from `peer`: its rule state from the peer's checkpoint."""
        state = data.get(camera) if isinstance(data, dict) else None
        if not isinstance(state, dict):
            return 0
        try:
            with self._lock:
                self.engine.restore_camera(camera, state)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("rules state of camera %s from edge %s not restored: %s", camera, peer, exc)
            return 0
        return 1
