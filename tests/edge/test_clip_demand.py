"""edge/publish/clip_demand.py: a camera's clip demand from its tracks' lifecycle events,
on its acks when it changed, to a new device session and every resend_s; capped and
counted; restored from a checkpoint and taken over with a camera."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from strata.edge.metrics import EdgeMetrics
from strata.edge.publish.clip_demand import ClipDemand
from strata.edge.tracking.answers import Answer
from strata.edge.tracking.handoff import AnsweredFrame
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.edge import EdgeClipsConfig
from strata.shared.contracts import events_pb2, frame_pb2

S = 10**9
NEW, END = events_pb2.TRACK_EVENT_TYPE_NEW, events_pb2.TRACK_EVENT_TYPE_END


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _event(kind: int, uid: str, first: int, last: int) -> events_pb2.TrackEvent:
    ev = events_pb2.TrackEvent(type=kind, camera_id="cam", track_uid=uid, capture_ns=last)  # type: ignore[arg-type]
    ev.path.first_seen_ns, ev.path.last_seen_ns = first, last
    return ev


def _frame(capture_ns: int, *events: events_pb2.TrackEvent, camera: str = "cam") -> AnsweredFrame:
    h = frame_pb2.FrameHeader(camera_id=camera, capture_ns=capture_ns, session_id=7)
    answer = Answer(h, TrackedBoxes.empty(True), 0.0, capture_ns, "predicted")
    return AnsweredFrame(answer, events=tuple(events))


def _ack(stage: ClipDemand, session: int = 7, camera: str = "cam") -> frame_pb2.FrameAck:
    ack = frame_pb2.FrameAck(camera_id=camera)
    stage.decorate(ack, frame_pb2.FrameHeader(camera_id=camera, session_id=session))
    return ack


def _demand(ack: frame_pb2.FrameAck) -> list[tuple[str, int, int]]:
    return [(d.track_uid, d.start_ns, d.end_ns) for d in ack.clips]


def _stage(**cfg: float) -> tuple[ClipDemand, Clock, EdgeMetrics]:
    clock, metrics = Clock(), EdgeMetrics(CollectorRegistry())
    return ClipDemand(EdgeClipsConfig(**cfg), metrics, clock), clock, metrics  # type: ignore[arg-type]


def test_live_and_recently_ended_tracks_ride_the_acks_when_changed_and_every_resend_s() -> None:
    stage, clock, metrics = _stage(keep_ended_s=10, resend_s=5)
    first = _ack(stage)  # a session's first ack hears the demand, empty as it is
    assert first.clips_set and not first.clips
    assert not _ack(stage).clips_set  # unchanged: nothing
    stage.answered(_frame(2 * S, _event(NEW, "a", 1 * S, 2 * S)))
    assert _demand(_ack(stage)) == [("a", 1 * S, 0)]
    stage.answered(_frame(3 * S, _event(NEW, "b", 3 * S, 3 * S)))
    stage.answered(_frame(4 * S, _event(END, "a", 1 * S, 4 * S)))
    # Live first, then the ended.
    assert _demand(_ack(stage)) == [("b", 3 * S, 0), ("a", 1 * S, 4 * S)]
    assert not _ack(stage).clips_set
    clock.now = 5.1  # unchanged, but resend_s passed
    assert _demand(_ack(stage)) == [("b", 3 * S, 0), ("a", 1 * S, 4 * S)]
    # Another session of the camera (a restarted agent) hears it at once.
    assert _ack(stage, session=8).clips_set
    # An ended track leaves keep_ended_s after its end (the camera's capture clock).
    stage.answered(_frame(14 * S + 1))
    again = _ack(stage)
    assert again.clips_set and _demand(again) == [("b", 3 * S, 0)]
    assert metrics.clip_demand_sent._value.get() == 6  # type: ignore[attr-defined]


def test_over_max_tracks_the_oldest_ended_are_left_out_and_counted_once() -> None:
    stage, _, metrics = _stage(max_tracks=2)
    old = (_event(NEW, "old", 1 * S, 1 * S), _event(END, "old", 1 * S, 2 * S))
    stage.answered(_frame(5 * S, *old))
    stage.answered(_frame(6 * S, _event(NEW, "x", 3 * S, 3 * S), _event(NEW, "y", 4 * S, 4 * S)))
    assert _demand(_ack(stage)) == [("y", 4 * S, 0), ("x", 3 * S, 0)]
    stage.answered(_frame(7 * S, _event(NEW, "z", 7 * S, 7 * S)))
    assert [uid for uid, *_ in _demand(_ack(stage))] == ["z", "y"]
    assert metrics.clip_demand_cut._value.get() == 2  # "old", then "x"  # type: ignore[attr-defined]


def test_the_demand_survives_a_checkpoint_and_moves_with_a_camera() -> None:
    stage, _, _ = _stage()
    stage.answered(_frame(2 * S, _event(NEW, "a", 1 * S, 2 * S)))
    stage.answered(_frame(3 * S, _event(NEW, "b", 3 * S, 3 * S), _event(END, "b", 3 * S, 3 * S)))
    saved = stage.snapshot()
    restarted, _, _ = _stage()
    assert restarted.restore(saved) == "2 track(s)"
    assert _demand(_ack(restarted)) == [("a", 1 * S, 0), ("b", 3 * S, 3 * S)]
    # An END after the restart ends the restored track.
    restarted.answered(_frame(5 * S, _event(END, "a", 1 * S, 4 * S)))
    assert ("a", 1 * S, 4 * S) in _demand(_ack(restarted))
    peer, _, _ = _stage()
    assert peer.take_over(saved, "cam", "edge-1") == 1
    assert peer.take_over(saved, "other", "edge-1") == 0
    assert peer.take_over({"cam": "junk"}, "cam", "edge-1") == 0
    assert [uid for uid, *_ in peer.demand("cam")] == ["a", "b"]
    peer.forget_cameras(["cam"])
    assert peer.demand("cam") == []
