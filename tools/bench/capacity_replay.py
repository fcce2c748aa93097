"""N cameras of one recorded device run replayed into an edge: one capacity trial.

A `Recording` is what one real device agent sent an edge for one clip (every message:
kept frames, notices of dropped frames, calibration bursts; tools/bench/capacity_record.py)
with when it sent each, relative to the frame's capture, and the detector's answer on every
frame of the clip (the reference). A trial replays N copies of it, each camera rotated to
start at another point of the clip (camera k at frame k*L/N, wrapping) and a fraction of a
frame interval apart, at the clip's frame rate, into a real edge over ZeroMQ, and scores
every camera against the reference with what the edge published for each of its frames.

Back-pressure as the device's sender does it (device/transport/outbox.py): a camera has at
most its credit window of frames in flight (sent, not finally acked); the edge's acks set
the window; a BUSY answer puts the frame back at the head of the camera's queue until its
retry_after_ms; notices need no credit but never overtake an earlier frame. A frame held
back longer than `hold_s` is dropped at the source and told to the edge as a notice
(skip_reason "overload"), as the device's degradation drops the oldest: the edge answers it
from its tracker. So a held-back frame is not lost by itself: the trial fails only when a
camera's box F1 against the reference falls under the target, or the p99 from capture to
the result of a frame the detector ran on passes `max_p99_s`. Unlike a live device, the
replay does not adapt its keeping to the edge's feedback (the recorded decisions stand).
"""

from __future__ import annotations

import heapq
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import zmq
from strata.shared.contracts import frame_pb2
from strata.shared.vision.agreement import agreement
from strata.shared.vision.boxes import FrameBoxes
from strata.shared.wire import is_events_topic, is_final, unpack_ack


@dataclass(frozen=True, slots=True)
class Sent:
    """One recorded message: its header, payload, and its send time after its capture."""

    header: bytes
    payload: bytes
    frame_index: int
    lag_s: float


@dataclass(frozen=True, slots=True)
class Recording:
    """What one device sent for one clip, and the detector on every frame of it."""

    profile: str
    cascade: bool
    fps: float
    frames: int
    messages: list[Sent]
    reference: list[FrameBoxes]
    # Labels of the reference's class ids (FrameBoxes classes index this), for the edge's.
    labels: dict[str, int]
    # The device agent's own CPU seconds for the run, and the clip's seconds.
    device_cpu_s: float = 0.0
    frames_kept: int = 0

    @property
    def kept_share(self) -> float:
        """Share of the clip's frames whose pixels were sent."""
        return self.frames_kept / self.frames if self.frames else 0.0


@dataclass(frozen=True, slots=True)
class TrialRules:
    """What a camera must keep for the trial to carry N, and how the replay behaves."""

    target_f1: float = 0.88
    max_p99_s: float = 1.0
    hold_s: float = 1.0
    window: int = 32
    drain_s: float = 10.0
    settle_s: float = 1.5
    # Frames a camera of its own sends first, one at a time (the runtime's first runs are
    # slow); not scored.
    warmup_frames: int = 5


@dataclass(frozen=True, slots=True)
class Trial:
    """One trial: N cameras, carried or not, and what decided it."""

    cameras: int
    carried: bool
    worst_f1: float
    mean_f1: float
    p99_s: float
    p50_s: float
    sent: int
    busy: int
    held_dropped: int
    unanswered_sent: int
    seconds: float
    replay_cpu_s: float
    load_avg_1m: float
    why: str = ""


@dataclass(slots=True)
class _Camera:
    id: str
    session: int
    rotation: int
    sock: zmq.Socket[bytes]
    queue: deque[tuple[int, int]] = field(default_factory=deque)  # (message, playback index)
    inflight: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> message
    window: int = 32
    retry_at: float = 0.0
    seq: int = 0


class Replay:
    """N rotated copies of `rec` sent into the edge at (`listen`, `publish`)."""

    def __init__(self, rec: Recording, cameras: int, listen: str, publish: str) -> None:
        self.rec, self.n = rec, cameras
        self.listen, self.publish = listen, publish
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.RCVHWM, 0)
        self.sub.connect(publish)
        self.results: dict[tuple[str, int], tuple[bool, int, frame_pb2.FrameDetections]] = {}
        self.busy = self.held_dropped = self.sent = 0
        self.max_window = 32

    def _warm(self, frames: int, timeout_s: float = 60.0) -> None:
        """Kept frames of the recording through the edge, each waited for."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.listen)
        session = secrets.randbits(63) or 1
        kept = [m for m in self.rec.messages if m.payload][:frames]
        deadline = time.monotonic() + timeout_s
        for seq, msg in enumerate(kept, 1):
            hdr = frame_pb2.FrameHeader()
            hdr.ParseFromString(msg.header)
            hdr.camera_id, hdr.session_id, hdr.sequence = "capwarm", session, seq
            hdr.frame_index, hdr.capture_ns = seq, time.time_ns()
            del hdr.earlier_skipped[:]
            sock.send_multipart([hdr.SerializeToString(), msg.payload])
            while time.monotonic() < deadline:
                if not self.sub.poll(100):
                    continue
                topic, body = self.sub.recv_multipart()
                if is_events_topic(topic):
                    continue
                got = frame_pb2.FrameDetections()
                got.ParseFromString(body)
                if got.camera_id == "capwarm" and got.frame_index == seq:
                    break
        sock.close(linger=0)

    def pidx(self, cam: _Camera, frame_index: int) -> int:
        """Playback index of a clip frame for a camera rotated by `cam.rotation`."""
        return (frame_index - cam.rotation) % self.rec.frames

    def run(self, rules: TrialRules) -> Trial:
        rec, n = self.rec, self.n
        self.max_window = rules.window
        cams = []
        for k in range(n):
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(self.listen)
            cams.append(
                _Camera(
                    f"cap{k:03d}",
                    secrets.randbits(63) or 1,
                    (k * rec.frames) // n,
                    s,
                    window=rules.window,
                )
            )
        time.sleep(0.5)  # connections and the subscription settle
        self._warm(rules.warmup_frames)
        period = 1.0 / rec.fps
        t0 = time.monotonic() + 0.5
        t0_ns = time.time_ns() + 500_000_000
        plan: list[tuple[float, int, int, int]] = []
        for k, cam in enumerate(cams):
            jitter = period * k / n
            for m, msg in enumerate(rec.messages):
                p = self.pidx(cam, msg.frame_index)
                plan.append((t0 + jitter + p * period + msg.lag_s, k, m, p))
        heapq.heapify(plan)
        cpu0 = time.process_time()
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        for cam in cams:
            poller.register(cam.sock, zmq.POLLIN)
        index_of = {c.sock: i for i, c in enumerate(cams)}
        capture_ns = [
            [t0_ns + int((period * k / n + p * period) * 1e9) for p in range(rec.frames)]
            for k in range(n)
        ]
        # The last send of the trial (a heap's last item is not its largest).
        last_due = max((item[0] for item in plan), default=t0)
        end = None
        while True:
            now = time.monotonic()
            while plan and plan[0][0] <= now:
                _, k, m, p = heapq.heappop(plan)
                cams[k].queue.append((m, p))
            for k, cam in enumerate(cams):
                self._pump(cam, capture_ns[k], now, rules.hold_s)
            busy_left = any(c.queue or c.inflight for c in cams)
            if not plan and not busy_left and end is None:
                end = now + rules.settle_s
            if end is not None and now >= end:
                break
            if now > last_due + rules.drain_s:
                break
            wait = 5.0 if not plan else max(0.0, min(5.0, (plan[0][0] - now) * 1e3))
            for sock, _ in poller.poll(max(1, int(wait))):
                if sock is self.sub:
                    self._result()
                else:
                    self._ack(cams[index_of[sock]])
        seconds = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        trial = self._score(cams, capture_ns, rules, seconds, cpu)
        self.ctx.destroy(linger=0)
        return trial

    def _pump(self, cam: _Camera, capture_ns: list[int], now: float, hold_s: float) -> None:
        """Send what the camera's queue holds, within its window; drop frames held too long."""
        rec = self.rec
        while cam.queue:
            m, p = cam.queue[0]
            msg = rec.messages[m]
            hdr = frame_pb2.FrameHeader()
            hdr.ParseFromString(msg.header)
            frame = hdr.kind in (frame_pb2.FRAME_KIND_FRAME, frame_pb2.FRAME_KIND_UNSPECIFIED)
            late = time.time_ns() - capture_ns[p] > hold_s * 1e9
            if frame and not late and (len(cam.inflight) >= cam.window or now < cam.retry_at):
                return
            cam.queue.popleft()
            payload = msg.payload
            if frame and late:  # held back too long: dropped at the source, told as a notice
                hdr.kind = frame_pb2.FRAME_KIND_SKIPPED
                hdr.skip_reason = "overload"
                hdr.payload_size = 0
                payload = b""
                frame = False
                self.held_dropped += 1
            self._stamp(cam, hdr, p, capture_ns)
            if frame:
                cam.inflight[hdr.sequence] = (m, p)
                self.sent += 1
            cam.sock.send_multipart([hdr.SerializeToString(), payload], copy=False)

    def _stamp(
        self, cam: _Camera, hdr: frame_pb2.FrameHeader, p: int, capture_ns: list[int]
    ) -> None:
        """The header as this camera sends it: its id, session, order and clock."""
        cam.seq += 1
        hdr.camera_id, hdr.session_id, hdr.sequence = cam.id, cam.session, cam.seq
        hdr.frame_index, hdr.capture_ns, hdr.send_ns = p, capture_ns[p], time.time_ns()
        runs = []
        for s in hdr.earlier_skipped:
            q = self.pidx(cam, s.frame_index)
            if q < p:  # an earlier frame of this playback (not across the wrap)
                s.frame_index, s.capture_ns = q, capture_ns[q]
                runs.append(s)
        del hdr.earlier_skipped[:]
        hdr.earlier_skipped.extend(runs)

    def _ack(self, cam: _Camera) -> None:
        ack = unpack_ack(cam.sock.recv_multipart())
        if ack.credits:  # the edge's grant, never above the device's configured window
            cam.window = max(1, min(self.max_window, ack.credits))
        if ack.status == frame_pb2.ACK_STATUS_BUSY:
            back = cam.inflight.pop(ack.sequence, None)
            if back is not None:
                self.busy += 1
                self.sent -= 1
                # Resent from the head of the queue under a new (higher) sequence.
                cam.queue.appendleft(back)
                cam.retry_at = time.monotonic() + max(ack.retry_after_ms, 1) / 1e3
        elif is_final(ack.status):
            cam.inflight.pop(ack.sequence, None)

    def _result(self) -> None:
        topic, body = self.sub.recv_multipart()
        if is_events_topic(topic):
            return
        msg = frame_pb2.FrameDetections()
        msg.ParseFromString(body)
        self.results[(msg.camera_id, msg.frame_index)] = (msg.predicted, time.time_ns(), msg)

    def _score(
        self,
        cams: list[_Camera],
        capture_ns: list[list[int]],
        rules: TrialRules,
        seconds: float,
        cpu: float,
    ) -> Trial:
        rec = self.rec
        f1s: list[float] = []
        lat: list[float] = []
        unanswered = 0
        for k, cam in enumerate(cams):
            ours = []
            ref = []
            for p in range(rec.frames):
                got = self.results.get((cam.id, p))
                ref.append(rec.reference[(p + cam.rotation) % rec.frames])
                if got is None:
                    ours.append(FrameBoxes.empty())
                    continue
                predicted, at_ns, msg = got
                ours.append(self._boxes(msg))
                if not predicted:
                    lat.append((at_ns - capture_ns[k][p]) / 1e9)
            unanswered += sum(1 for _ in cam.inflight)
            f1s.append(agreement(ref, ours).f1)
        worst = min(f1s) if f1s else 0.0
        p99 = float(np.percentile(lat, 99)) if lat else float("inf")
        p50 = float(np.percentile(lat, 50)) if lat else float("inf")
        why = []
        if worst < rules.target_f1:
            why.append(f"a camera's box F1 {worst:.3f} < {rules.target_f1:g}")
        if p99 > rules.max_p99_s:
            why.append(f"capture-to-result p99 {p99:.2f} s > {rules.max_p99_s:g} s")
        return Trial(
            cameras=self.n,
            carried=not why,
            worst_f1=worst,
            mean_f1=float(np.mean(f1s)) if f1s else 0.0,
            p99_s=p99,
            p50_s=p50,
            sent=self.sent,
            busy=self.busy,
            held_dropped=self.held_dropped,
            unanswered_sent=unanswered,
            seconds=seconds,
            replay_cpu_s=cpu,
            load_avg_1m=os.getloadavg()[0],
            why="; ".join(why),
        )

    def _boxes(self, msg: frame_pb2.FrameDetections) -> FrameBoxes:
        dets = msg.detections
        ids = self.rec.labels
        boxes = np.array(
            [(d.box.x1, d.box.y1, d.box.x2, d.box.y2) for d in dets], np.float32
        ).reshape(-1, 4)
        classes = np.array(
            [ids.get(d.label or str(d.class_id), -1 - d.class_id) for d in dets], np.int32
        )
        scores = np.array([d.score for d in dets], np.float32)
        return FrameBoxes.of(boxes, classes, scores)
