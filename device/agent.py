"""The device agent: a thread per camera from decoding to the sender, with one metrics registry.

camera thread (decode, motion, BGR, JPEG) ─┐
camera thread (decode, motion, BGR, JPEG) ─┼─▶ outboxes ─▶ sender (DEALER, window, spool)
camera thread ...                         ─┘                  │ ▲
                                                     frames ──┘ └── acks
                                                      edge ROUTER

A relevance gate that can drop frames (threshold above 0) sits between a camera's motion
decision and its encoding: camera threads -> gate inbox -> gate worker (batches across
cameras, MobileNetV3) -> encoding on the gate worker's thread (device/pipeline.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry
from strata.shared.config.device import CameraConfig, DeviceConfig, SourceConfig
from strata.shared.contracts import frame_pb2

from .camera import CameraState, CameraStatus, CameraWorker
from .capture.packet_ring import PacketRing
from .capture.sources import camera_name
from .clips.cutter import ClipCutter
from .clips.demand import DemandFollower, DemandQueue
from .clips.spool import ClipSpool
from .clips.uploader import ClipUploader
from .filters.burst_slots import BurstSlots
from .filters.cascade import CascadeMetrics
from .filters.edge_acks import EdgeLink
from .filters.gate import RelevanceGate, load_gate
from .filters.inbox import GateInbox
from .filters.site_gate import site_route
from .filters.versions import GateSwitcher, device_version_metrics
from .metrics import ClipMetrics, DeviceMetrics
from .pipeline import CameraPipeline, KeyframeRequests, PipelineSetup
from .transport.sender import Sender
from .transport.sender_parts import SenderHooks, SenderSetup

log = logging.getLogger(__name__)


def camera_ids(cameras: Sequence[CameraConfig]) -> list[str]:
    """Ids for the cameras: the configured one, else derived from the source, made unique."""
    seen: dict[str, int] = {}
    out = []
    for cam in cameras:
        base = cam.id or camera_name(cam.source)
        n = seen.get(base, 0) + 1
        seen[base] = n
        out.append(base if n == 1 else f"{base}-{n}")
    if len(set(out)) != len(out):
        raise ValueError(f"camera ids are not unique: {out}")
    return out


class Agent:
    """Runs every camera of one device; `run_until_done` for finite sources."""

    def __init__(
        self,
        cfg: DeviceConfig,
        models_repository: str = "",
        registry: CollectorRegistry | None = None,
        gate: RelevanceGate | None = None,
        clip_owner: Callable[[str], bool] | None = None,
    ) -> None:
        if not cfg.cameras:
            raise ValueError("no cameras: give at least one --source")
        self.cfg = cfg
        self.agent_id = cfg.agent_id or socket.gethostname()
        self.metrics = DeviceMetrics(registry)
        # A gate loaded here from the repository can switch versions at run time.
        site_on = cfg.gate.enabled and cfg.gate.site.enabled
        from_repo = gate is None and cfg.gate.enabled and not cfg.gate.model_path and not site_on
        if gate is None and cfg.gate.enabled and not site_on:
            gate = load_gate(cfg.gate, models_repository)
        # The gate that learns the site from the edge's answers (device/filters/site_gate.py).
        self.site = site_route(cfg.gate, models_repository, self.metrics.registry)
        self.gate = gate if cfg.gate.enabled else None
        self.inbox = GateInbox(cfg.gate.queue_frames)
        self.sender = self._make_sender()
        import cv2  # here, as the worker's: cv2 stays out of `strata --help`

        from .transport.encoder import ScaleTarget
        from .worker import GateSetup, GateWorker

        # The host's cores belong to the cameras' decoders: cv2's worker pool, woken for
        # images of a few hundred pixels on every frame, costs more than it saves (process-
        # wide: the agent owns its process; docs/benchmarks.md, "Device agent").
        cv2.setNumThreads(1)

        # Frames are scaled to fit this: the configured size, else the edge model's input
        # once the edge announces it (EdgeInfo).
        self.scale = ScaleTarget(cfg.payload.max_width, cfg.payload.max_height)
        self.keyframes = KeyframeRequests()
        self._setup = self._pipeline_setup()
        # Per camera id, kept across a removal: a camera added again continues its H.264
        # stream's numbering (from a keyframe).
        self.pipelines: dict[str, CameraPipeline] = {}
        self.switcher = self._gate_switcher(models_repository) if from_repo else None
        self.worker = GateWorker(
            self.inbox,
            self.metrics,
            GateSetup(cfg.gate, cfg.cascade, self.site),
            self.gate,
            self.switcher,
        )
        self.cascade_metrics = CascadeMetrics(self.metrics.registry)
        self.bursts = BurstSlots(cfg.cascade.concurrent_bursts)
        self.cameras: list[CameraWorker] = []
        # Per camera with clips on: what cuts its clips from its packet ring, and follows
        # the edge's clip demand; the clips folder and its upload (docs/device.md, "Clips").
        self.clip_cutters: dict[str, ClipCutter] = {}
        self.clip_followers: dict[str, DemandFollower] = {}
        self.clip_demands = DemandQueue(self.clip_followers)
        self.clip_spool, self.clip_uploader = self._clip_store(clip_owner)
        self._cams_lock = threading.Lock()
        self._draining: dict[str, threading.Thread] = {}
        # Cameras the config asks for now (decode_ahead's auto is settled against it).
        self._configured = len(cfg.cameras)
        for cam_id, cam in zip(camera_ids(cfg.cameras), cfg.cameras, strict=True):
            self.cameras.append(self._make_camera(cam_id, cam))
        # What the edge says in acks reaches the policies, the scaler and the encoder.
        self.link = EdgeLink(
            {c.camera_id: c.policy for c in self.cameras if c.policy is not None},
            self.scale,
            self.keyframes,
            cfg.payload.scale_to_model and not (cfg.payload.max_width or cfg.payload.max_height),
        )
        self._started = False
        self._stopped = False

    def _make_sender(self) -> Sender:
        # The sender's hooks are this agent's methods: what it reports reaches the edge link
        # (built in __init__, before the sender thread starts) and the cameras.
        cfg = self.cfg
        return Sender(
            cfg.edges or cfg.edge,
            cfg.sender,
            self.metrics,
            cfg.degrade,
            setup=SenderSetup(routing=cfg.routing, agent_id=self.agent_id),
            hooks=SenderHooks(
                on_ack=self._on_ack,
                on_lost=self._on_lost,
                on_move=self._moved,
                on_final=self._on_final if self.site is not None else None,
            ),
        )

    def _clip_store(
        self, clip_owner: Callable[[str], bool] | None
    ) -> tuple[ClipSpool | None, ClipUploader | None]:
        """The clips folder and its upload, when clips are on."""
        if not self.cfg.clips.enabled:
            return None, None
        spool = ClipSpool(self.cfg.clips, self.agent_id, self.metrics)
        # A worker process takes back only its cameras' clips (device/workers.py).
        spool.recover(clip_owner or (lambda _: True))
        return spool, ClipUploader(self.cfg.clips.upload, spool, self.metrics)

    def _pipeline_setup(self) -> PipelineSetup:
        """What every camera's pipeline is built with (device/pipeline.py)."""
        cfg = self.cfg
        return PipelineSetup(
            self.agent_id,
            cfg.sender,
            cfg.payload,
            self.scale,
            self.keyframes,
            notice_run=cfg.cascade.notice_run,
            notice_run_s=cfg.cascade.notice_run_ms / 1e3,
        )

    def _gate_switcher(self, models_repository: str) -> GateSwitcher | None:
        """Run-time versions of a gate loaded from the repository (None: no gate)."""
        if self.gate is None:
            return None
        from strata.shared.models import repository_for

        return GateSwitcher(
            repository_for(models_repository, self.cfg.gate.model, "device.gate.model"),
            self.gate,
            self.cfg.gate,
            self.cfg.versions,
            device_version_metrics(self.metrics.registry),
            self.metrics.registry,
        )

    def _make_camera(self, cam_id: str, cam: CameraConfig) -> CameraWorker:
        self.inbox.add_camera(cam_id)
        self.sender.add_camera(cam_id, cam.model)
        pipeline = self.pipelines.get(cam_id)
        if pipeline is None:
            worker = self.worker
            pipeline = self.pipelines[cam_id] = CameraPipeline(
                cam_id,
                self._setup,
                self.sender.submit,
                self.metrics.camera(cam_id),
                inbox=self.inbox if worker.gating else None,
                passed=worker.passed if worker.switcher is not None else None,
            )
        self.worker.add_camera(cam_id, pipeline)
        return CameraWorker(
            cam_id,
            cam.source,
            self._source_config(),
            self.cfg.motion,
            pipeline,
            self.metrics.camera(cam_id),
            self.cfg.cascade,
            self.cascade_metrics,
            self.sender.degrader(cam_id),
            ring=self._clip_ring(cam_id),
            bursts=self.bursts,
        )

    def _source_config(self) -> SourceConfig:
        """`device.source` with decode_ahead's auto settled for a camera started now: on
        while the cameras are fewer than the cores (device/capture/decode_ahead.py says why)."""
        src = self.cfg.source
        if src.decode_ahead != "auto":
            return src
        ahead = self._configured < (os.cpu_count() or 1)
        return src.model_copy(update={"decode_ahead": "on" if ahead else "off"})

    def _clip_ring(self, cam_id: str) -> PacketRing | None:
        """The camera's packet ring, its cutter and the follower of its clip demand
        (`device.clips.enabled`), else None (docs/device.md, "Clips")."""
        spool = self.clip_spool
        if spool is None:
            return None
        metrics = ClipMetrics(self.metrics, cam_id)
        ring = PacketRing(cam_id, self.cfg.clips, metrics)
        session = f"{self.sender.session_id:016x}"
        cutter = ClipCutter(ring, self.cfg.clips, metrics, spool, session)
        self.clip_cutters[cam_id] = cutter
        self.clip_followers[cam_id] = DemandFollower(cutter, spool.served.get(cam_id, ()))
        return ring

    def reload(self, cameras: Sequence[CameraConfig]) -> tuple[list[str], list[str]]:
        """Run exactly these cameras from now on: start the new ones, stop the removed ones
        after their frames in flight are settled (in the background). Returns (added,
        removed) ids; ValueError for ids that are not unique."""
        ids = camera_ids(cameras)
        with self._cams_lock:
            running = {c.camera_id: c for c in self.cameras}
            wanted = dict(zip(ids, cameras, strict=True))
            added = [i for i in ids if i not in running and i not in self._draining]
            waiting = [i for i in ids if i in self._draining]
            removed = [i for i in running if i not in wanted]
            self._configured = len(wanted)
            for cam_id in removed:
                worker = running[cam_id]
                self.cameras.remove(worker)
                worker.stop()
                t = threading.Thread(
                    target=self._drain, args=(worker,), name=f"drain-{cam_id}", daemon=True
                )
                self._draining[cam_id] = t
                t.start()
            for cam_id in added:
                worker = self._make_camera(cam_id, wanted[cam_id])
                if worker.policy is not None:
                    self.link.policies[cam_id] = worker.policy
                self.cameras.append(worker)
                # A camera added again after a removal restarts its H.264 stream (its encoder
                # outlives the removal; the edge may have forgotten the decoder).
                self.keyframes.request_keyframe(cam_id, "camera added")
                if self._started:
                    log.info("camera %s added: %s", cam_id, worker.source)
                    worker.start()
        for cam_id in waiting:
            log.warning("camera %s is still draining; add it again once it has gone", cam_id)
        return added, removed

    def _drain(self, worker: CameraWorker) -> None:
        """A removed camera: stop reading, let its frames reach the edge, then forget it."""
        cam_id = worker.camera_id
        worker.join(self.cfg.source.read_timeout_s + 2.0)
        deadline = time.monotonic() + self.cfg.sender.drain_timeout_s
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            # Settled for a while: nothing left in the gate inbox or the sender.
            if self.inbox.waiting(cam_id) == 0 and self.sender.pending_of(cam_id) == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 0.5:
                    break
            else:
                quiet_since = None
            time.sleep(0.05)
        left = self.sender.remove_camera(cam_id)
        if left:
            self.metrics.dropped_reason.labels(cam_id, "removed").inc(left)
            log.warning(
                "camera %s removed with %d frame(s) not settled after %.1fs (dropped)",
                cam_id,
                left,
                self.cfg.sender.drain_timeout_s,
            )
        else:
            log.info("camera %s removed; every frame it sent was settled", cam_id)
        with self._cams_lock:
            self._draining.pop(cam_id, None)
            self.link.policies.pop(cam_id, None)

    def draining(self) -> list[str]:
        """Removed cameras whose frames are still being settled."""
        with self._cams_lock:
            return list(self._draining)

    def _on_final(
        self, camera_id: str, header: frame_pb2.FrameHeader, ack: frame_pb2.FrameAck
    ) -> None:
        """Sender thread: a kept frame's final ack; its answer teaches the site gate."""
        if self.site is not None and ack.HasField("moving_objects"):
            self.site.gate.answer(camera_id, header.frame_index, ack.moving_objects)

    def _on_ack(self, ack: frame_pb2.FrameAck) -> None:
        self.link.on_ack(ack)
        self.clip_demands.on_ack(ack)

    def _on_lost(self, camera_id: str, frames: int) -> None:
        self.link.on_lost(camera_id, frames)

    def _moved(self, camera_id: str, edge: str) -> None:
        # An H.264 stream must start with a keyframe on its new edge.
        self.keyframes.request_keyframe(camera_id, f"moved to edge {edge}")

    def start(self) -> None:
        """Start the sender, the gate worker (where it has work) and every camera;
        SenderError if the edge endpoint is unusable."""
        if not self.sender.started:
            self.sender.start()
        self.worker.start()
        if self.clip_uploader is not None:
            self.clip_demands.start()
            self.clip_uploader.start()
        for cam in self.cameras:
            log.info("camera %s: %s", cam.camera_id, cam.source)
            cam.start()
        self._started = True

    @property
    def registry(self) -> CollectorRegistry:
        """The agent's metrics."""
        return self.metrics.registry

    def worst_lag_s(self) -> float:
        """The worst lag any camera's source reported (every frame, not a gauge's sample)."""
        return max((c.m.worst_lag_s for c in list(self.cameras)), default=0.0)

    def statuses(self) -> list[CameraStatus]:
        """A snapshot of every camera."""
        return [c.status() for c in list(self.cameras)]

    def cameras_done(self) -> bool:
        """Every camera thread has finished (ended or failed)."""
        return all(c.done for c in list(self.cameras))

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every camera has finished; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            running = [c for c in list(self.cameras) if not c.done]
            if not running:
                return True
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return False
            # A join, not a sleep: the last camera's end is seen when it happens.
            running[0].join(left)

    def stop(self, drain_timeout_s: float | None = None) -> None:
        """Stop cameras, gate the frames still queued, deliver what the edge will ack
        within the drain timeout, and close everything."""
        if self._stopped:
            return
        self._stopped = True
        for cam in self.cameras:
            cam.stop()
        for cam in self.cameras:
            if not cam.join(self.cfg.source.read_timeout_s + 2.0):
                log.warning("camera %s did not stop in time", cam.camera_id)
        self.clip_demands.stop()
        for cutter in self.clip_cutters.values():  # an open clip ends with its reason
            cutter.close("the agent stopped")
        self.inbox.close()
        if self.switcher is not None:
            self.switcher.stop()
        self.worker.finish()
        drain = self.cfg.sender.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        self.sender.stop(drain)
        if self.clip_uploader is not None:  # what is not uploaded waits for the next run
            self.clip_uploader.drain(drain)
            self.clip_uploader.stop()
        # The gate serving now (a version switch replaced and closed the first one).
        if self.worker.gate is not None:
            self.worker.gate.close()

    def request_model_check(self) -> None:
        """Look for a newer gate version now (SIGHUP)."""
        if self.switcher is not None:
            self.switcher.request()

    def run_until_done(self, timeout: float | None = None) -> int:
        """Start, wait for every camera to end, drain, stop. Exit code: 0 when every camera
        ended normally, 1 when any failed."""
        if not self._started:
            self.start()
        self.wait(timeout)
        self.stop()
        failed = [s for s in self.statuses() if s.state == CameraState.FAILED]
        return 1 if failed else 0
