"""Track events of a bench run: from the edge's PUB copy, or replayed offline.

The edge publishes a copy of every TrackEvent on its results PUB socket under the events
topic (`EVENTS_TOPIC` + camera id; the durable copy goes up the uplink). `EventTap`
subscribes to it before the device starts, so a run's events are exactly what the edge's
rules stage emitted. Where the edge has no rules stage (nothing arrives on the topic), or for a
pattern of frames no daemon ran (uniform sampling), `replay_rules` turns per-frame tracked
boxes into the `TrackFrame`s the edge would build (edge/rules/frame.py) and runs the same
`RulesEngine` over them:

- `observed`: the frame was detected (its boxes carry the detector's matches); a
  predicted frame's boxes are the tracker's;
- `confirmed`: the track has `min_hits` detections so far (the tracker's hits);
- `ended`: at a detected frame, tracks unseen more than `max_lost` frames (the tracker's
  own retirement rule), each once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.frame import TrackFrame
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared import wire
from strata.shared.config.edge import TrackingConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import events_pb2
from strata.tools.bench.cascade import Labels
from strata.tools.demo.results import Received

log = logging.getLogger(__name__)

# The topic prefix of the edge's TrackEvent copies on its PUB socket: the rules stage's
# `shared.wire.EVENTS_TOPIC_PREFIX` (a NUL first, so no camera's results topic matches it);
# its value where that stage has not landed yet.
EVENTS_TOPIC: bytes = getattr(wire, "EVENTS_TOPIC_PREFIX", b"\0events/")


@dataclass(frozen=True, slots=True)
class Tracked:
    """One answered frame of the camera, as published: tracked boxes and how they came."""

    index: int
    capture_ns: int
    boxes: np.ndarray  # (N, 4) source pixels
    scores: np.ndarray
    class_ids: np.ndarray
    track_ids: np.ndarray  # uint64, 0: untracked
    detected: bool


def published(results: Mapping[tuple[str, int], Received], labels: Labels) -> list[Tracked]:
    """The edge's published frames of one camera in frame order (label names -> `labels`)."""
    out = []
    for (_camera, index), r in sorted(results.items(), key=lambda kv: kv[0][1]):
        m = r.message
        dets = m.detections
        out.append(
            Tracked(
                index=index,
                capture_ns=int(m.timing.capture_ns),
                boxes=np.array(
                    [(d.box.x1, d.box.y1, d.box.x2, d.box.y2) for d in dets], np.float64
                ).reshape(-1, 4),
                scores=np.array([d.score for d in dets], np.float64),
                class_ids=np.array([labels.id(d.label or str(d.class_id)) for d in dets], np.int64),
                track_ids=np.array([d.track_id for d in dets], np.uint64),
                detected=not m.predicted,
            )
        )
    return out


def replayed(answers: Sequence[TrackedBoxes], capture_ns: Sequence[int]) -> list[Tracked]:
    """calibration.replay's answers (frame i at `capture_ns[i]`) as published frames."""
    return [
        Tracked(
            i,
            capture_ns[i],
            a.boxes.astype(np.float64),
            a.scores.astype(np.float64),
            a.class_ids.astype(np.int64),
            a.track_ids.astype(np.uint64),
            not a.predicted,
        )
        for i, a in enumerate(answers)
    ]


@dataclass(frozen=True, slots=True)
class FrameSource:
    """What every TrackFrame of one camera shares."""

    camera_id: str
    frame_size: tuple[int, int]
    labels: tuple[str, ...]


class TrackFrames:
    """Published frames of one camera, one at a time, into the TrackFrames the edge's
    tracking stage would hand the rules stage (`track_frames` for a whole list)."""

    def __init__(self, source: FrameSource, tracking: TrackingConfig) -> None:
        self.source = source
        self.tracking = tracking
        self._hits: dict[int, int] = {}
        self._seen: dict[int, int] = {}

    def __call__(self, f: Tracked) -> TrackFrame:
        hits, seen, source = self._hits, self._seen, self.source
        keep = f.track_ids != 0
        ids = f.track_ids[keep]
        if f.detected:
            for t in ids.tolist():
                hits[t] = hits.get(t, 0) + 1
                seen[t] = f.index
        gone = tuple(
            t for t, s in seen.items() if f.detected and f.index - s > self.tracking.max_lost
        )
        for t in gone:
            del seen[t]
        return TrackFrame(
            camera_id=source.camera_id,
            capture_ns=f.capture_ns,
            frame_size=source.frame_size,
            track_ids=ids,
            boxes=f.boxes[keep],
            scores=f.scores[keep],
            class_ids=f.class_ids[keep],
            confirmed=np.array([hits.get(t, 0) >= self.tracking.min_hits for t in ids.tolist()]),
            observed=np.full(ids.shape[0], f.detected),
            labels=source.labels,
            ended=gone,
        )


def track_frames(
    frames: Iterable[Tracked], source: FrameSource, tracking: TrackingConfig
) -> list[TrackFrame]:
    """The TrackFrames the edge's tracking stage would hand the rules stage."""
    build = TrackFrames(source, tracking)
    return [build(f) for f in frames]


def replay_rules(frames: Sequence[TrackFrame], rules: RulesConfig) -> list[events_pb2.TrackEvent]:
    """A fresh RulesEngine over `frames`: the events, in order."""
    engine = RulesEngine(
        rules, "bench-replay", wall_ns=lambda: frames[0].capture_ns if frames else 0
    )
    out: list[events_pb2.TrackEvent] = []
    for f in frames:
        out += engine.process(f)
    return out


def save_run(
    path: Path, frames: Sequence[Tracked], events: Sequence[events_pb2.TrackEvent]
) -> None:
    """One run's published frames and events in one .npz (`load_run` reads it back), so
    the rules can be evaluated again offline (`strata bench rules --from DIR`)."""
    counts = np.array([f.boxes.shape[0] for f in frames], np.int64)

    def cat(name: str, dtype: type, width: int = 0) -> np.ndarray:
        parts: list[np.ndarray] = [np.asarray(getattr(f, name), dtype) for f in frames]
        shape = (0, width) if width else (0,)
        return np.concatenate(parts) if parts else np.zeros(shape, dtype)

    np.savez_compressed(
        path,
        index=np.array([f.index for f in frames], np.int64),
        capture_ns=np.array([f.capture_ns for f in frames], np.int64),
        detected=np.array([f.detected for f in frames], bool),
        counts=counts,
        boxes=cat("boxes", np.float64, 4),
        scores=cat("scores", np.float64),
        class_ids=cat("class_ids", np.int64),
        track_ids=cat("track_ids", np.uint64),
        events=np.array([e.SerializeToString() for e in events], dtype=object),
    )


def load_run(path: Path) -> tuple[list[Tracked], list[events_pb2.TrackEvent]]:
    """Inverse of `save_run`."""
    with np.load(path, allow_pickle=True) as z:
        ends = np.cumsum(z["counts"])
        starts = ends - z["counts"]
        boxes, scores, cls, ids = z["boxes"], z["scores"], z["class_ids"], z["track_ids"]
        frames = [
            Tracked(int(i), int(t), boxes[a:b], scores[a:b], cls[a:b], ids[a:b], bool(d))
            for i, t, d, a, b in zip(
                z["index"].tolist(),
                z["capture_ns"].tolist(),
                z["detected"].tolist(),
                starts.tolist(),
                ends.tolist(),
                strict=True,
            )
        ]
        events = [events_pb2.TrackEvent.FromString(bytes(b)) for b in z["events"].tolist()]
    return frames, events


class EventTap:
    """Every TrackEvent the edge publishes on `address` (topic `EVENTS_TOPIC`), on a thread.

    Connect it before the device starts: a SUB socket connects before its PUB binds and
    retries, and a PUB drops what it sends before a subscription arrives.
    """

    def __init__(self, address: str) -> None:
        import zmq

        self._ctx: Any = zmq.Context()
        self._sock: Any = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)  # the bench must see every event
        self._sock.setsockopt(zmq.RECONNECT_IVL, 10)
        self._sock.setsockopt(zmq.SUBSCRIBE, EVENTS_TOPIC)
        self._sock.connect(address)
        self._events: list[events_pb2.TrackEvent] = []
        self.malformed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import zmq

        while not self._stop.is_set():
            if not self._sock.poll(50):
                continue
            while True:
                try:
                    parts = self._sock.recv_multipart(flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                ev = events_pb2.TrackEvent()
                try:
                    ev.ParseFromString(parts[-1])
                except Exception as exc:  # not a TrackEvent: count, go on
                    self.malformed += 1
                    log.warning("a message on %r did not parse as a TrackEvent (%s)", parts[0], exc)
                    continue
                with self._lock:
                    self._events.append(ev)

    def events(self) -> list[events_pb2.TrackEvent]:
        """What arrived so far, in arrival order (a camera's: its sequence order)."""
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        """Stop the thread and close the socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self._sock.close(0)
        self._ctx.term()
