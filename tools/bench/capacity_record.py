"""Record once per profile what the real device agent sends: the capacity bench's input.

The real daemons over loopback (`strata.tools.demo.pipeline`, as the cascade bench runs
them), with a recording proxy between the device agent and the edge: every message the
device sends passes through it unchanged (and every ack back), and each frame and notice is
kept with its delay after its capture. The clip plays at its frame rate, the edge alone
(one camera: the device's decisions are those of an unloaded edge). Beside it, the
reference: the cascade bench's run of the detector on every frame (gates off).

The device agent's CPU time is read from /proc while it runs: the capacity figures are of
the edge alone, and what each camera costs its device is given apart.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import zmq
from strata.shared.config.base import merge
from strata.shared.contracts import frame_pb2
from strata.shared.loopback import free_port
from strata.tools.bench.capacity_replay import Recording, Sent
from strata.tools.bench.cascade import (
    GATES_OFF,
    NO_SHEDDING,
    Labels,
    boxes_of,
    cascade_config,
    clip_fps,
    clip_shape,
    reference_frames,
    reference_overrides,
    scaled_reference,
)
from strata.tools.demo.names import COUNTS
from strata.tools.demo.pipeline import PipelineRun, RunOptions
from strata.tools.demo.stack import Camera
from strata.tools.demo.summary import drops, value

# The cascade off: every frame goes to the edge, as the device sends it by default (JPEG
# at the model's input size); no motion gate, relevance gate or cascade.
EVERY_FRAME: dict[str, Any] = {
    "device": {
        "motion": {"enabled": False},
        "gate": {"enabled": False},
        "cascade": {"enabled": False},
    }
}


class RecordingProxy:
    """ROUTER for the device, DEALER to the edge; records what the device sends."""

    def __init__(self, edge: str) -> None:
        self.edge = edge
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.sent: list[tuple[int, bytes, bytes]] = []  # (received ns, header, payload)
        self.pid = 0
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capacity-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _sample_cpu(self) -> None:
        """The device process's user+system CPU seconds so far (kept at its last value)."""
        if not self.pid:
            return
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return
        self.cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        ctx = zmq.Context()
        front = ctx.socket(zmq.ROUTER)
        front.bind(self.address)
        back = ctx.socket(zmq.DEALER)
        back.connect(self.edge)
        ident = b""
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        poller.register(back, zmq.POLLIN)
        last_cpu = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_cpu > 0.25:
                self._sample_cpu()
                last_cpu = time.monotonic()
            for sock, _ in poller.poll(50):
                if sock is front:
                    ident, *parts = front.recv_multipart()
                    now = time.time_ns()
                    back.send_multipart(parts)
                    if len(parts) == 2:
                        self.sent.append((now, bytes(parts[0]), bytes(parts[1])))
                elif ident:
                    front.send_multipart([ident, *back.recv_multipart()])
                else:
                    back.recv_multipart()
        ctx.destroy(linger=0)


def to_messages(sent: list[tuple[int, bytes, bytes]]) -> list[Sent]:
    """Frames and notices (not heartbeats), each with its frame and its delay after capture."""
    out = []
    for at_ns, head, payload in sent:
        hdr = frame_pb2.FrameHeader()
        hdr.ParseFromString(head)
        if hdr.kind == frame_pb2.FRAME_KIND_HEARTBEAT:
            continue
        lag = min(2.0, max(0.0, (at_ns - hdr.capture_ns) / 1e9))
        out.append(Sent(head, payload, int(hdr.frame_index), lag))
    return out


def record(
    clip: Path, workdir: Path, detector: dict[str, Any], cascade: bool, reference: Any
) -> Recording:
    """One real device run over `clip` through the proxy (`cascade` on, or every frame)."""
    labels, ref = reference
    fps = clip_fps(clip) or 10.0
    config = (
        cascade_config("jpeg", merge(NO_SHEDDING, detector))
        if cascade
        else merge(merge(NO_SHEDDING, detector), EVERY_FRAME)
    )
    run = PipelineRun(
        workdir,
        [Camera("rec", str(clip))],
        config,
        RunOptions(quiet_s=1.5, drain_timeout_s=600, startup_timeout_s=120.0),
    )
    proxy = RecordingProxy(f"tcp://127.0.0.1:{run.stack.ports.edge_listen}")
    run.stack.extra_config = merge(run.stack.extra_config, {"device": {"edge": proxy.address}})
    proxy.start()
    watcher = threading.Event()

    def find_pid() -> None:
        while not watcher.is_set() and not proxy.pid:
            proc = run.stack.procs.get("device")
            popen = getattr(proc, "popen", None) if proc is not None else None
            if popen is not None:
                proxy.pid = popen.pid
            time.sleep(0.05)

    finder = threading.Thread(target=find_pid, daemon=True)
    finder.start()
    try:
        outcome = run.execute()
    finally:
        watcher.set()
        proxy.stop()
    if outcome.error is not None:
        raise RuntimeError(str(outcome.error))
    messages = to_messages(proxy.sent)
    kept = sum(1 for m in messages if m.payload)
    return Recording(
        profile=clip.stem,
        cascade=cascade,
        fps=fps,
        frames=len(ref),
        messages=messages,
        reference=ref,
        labels=labels.ids,
        device_cpu_s=proxy.cpu_s,
        frames_kept=kept,
    )


def reference_run(
    clip: Path, workdir: Path, detector: dict[str, Any], model_input: tuple[int, int]
) -> tuple[Labels, list[Any]]:
    """The detector on every frame of `clip` (the cascade bench's reference run)."""
    from strata.tools.bench.cascade import run_once

    labels = Labels()
    extra = merge(NO_SHEDDING, detector)
    paced = merge(merge(extra, GATES_OFF), reference_overrides(*clip_shape(clip)))
    paced = merge(paced, scaled_reference(model_input))
    ref = run_once(workdir, clip, paced, 1800.0)
    decoded = int(value(ref.scrapes, COUNTS["decoded"]))
    boxes = boxes_of(ref.results, labels)
    total = decoded or (max(boxes, default=-1) + 1)
    return labels, reference_frames(clip.name, boxes, total, drops(ref.scrapes))
