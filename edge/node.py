"""The edge node: ingest thread (ROUTER, acks), worker thread (batch, detect, publish), uplink.

ZeroMQ sockets are not thread-safe, so each belongs to one thread: the ROUTER to ingest,
the PUB to the worker. Frames cross from ingest to the worker through the per-camera
queues; final acks cross back through an inproc PUSH/PULL pair, so only the ingest thread
ever writes to the ROUTER. A frame's final ack (PROCESSED) leaves only after its result
was published (see strata.edge.flow.delivery for the whole ack lifecycle).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import Counter
from strata.edge.flow.delivery import PROCESSED, QUEUED, REJECTED, SHED, Delivery
from strata.edge.flow.ledger import SettledStream
from strata.edge.flow.queues import CameraQueues
from strata.edge.inference.decode import FrameDecoder
from strata.edge.inference.detector import Detector, InFlight, model_labels, open_staged
from strata.edge.inference.scheduler import (
    DecisionClock,
    SchedulerMetrics,
    SchedulerWindow,
    make_policy,
    save_policy,
)
from strata.edge.inference.versions import LoadedVersion, ModelSwitcher, VersionMetrics, version_of
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.edge.ingest.intake import Ingest
from strata.edge.ingest.peers import PeerMonitor
from strata.edge.metrics import EdgeMetrics
from strata.edge.overload.gpu import DegradationController
from strata.edge.publish.crops import CropSelector
from strata.edge.state.checkpoint import VERSION as CHECKPOINT_VERSION
from strata.edge.state.checkpoint import (
    CheckpointBody,
    Checkpointer,
    CheckpointMetrics,
    PeerCheckpointError,
    StreamCheckpoint,
    TrackerCheckpoint,
    UplinkCheckpoint,
    counter_values,
    restore_counters,
)
from strata.edge.tracking.answers import Answer
from strata.edge.tracking.cascade import EdgeCascade
from strata.edge.tracking.tracker import TrackedBoxes
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import current_version, frame_pb2
from strata.shared.curve import serve_curve
from strata.shared.gpu_telemetry import DcgmCollector, GpuTelemetry, TelemetrySource, open_nvml
from strata.shared.imagecheck import ImageLimits
from strata.shared.models import ModelRepository
from strata.shared.runtime import ModelLoadError
from strata.shared.runtime.pool import report_leaks
from strata.shared.runtime.staging import StagedRunner
from strata.shared.vision import FrameBoxes
from strata.shared.wire import detections_topic, heartbeat_of

log = logging.getLogger(__name__)

POLL_MS = 100
# Back ends whose batch times the GPU degradation SLA does not describe.
CPU_BACKENDS = frozenset({"onnxruntime-cpu"})
# How long the worker waits to hand a final ack to the ingest thread before counting it unsent.
ACK_PIPE_TIMEOUT_MS = 2000
# The image of a frame answered without decoding it (degraded, from its camera's cache).
_NO_IMAGE = np.zeros((0, 0, 3), np.uint8)
# How often ingest looks for cameras gone silent.
SWEEP_S = 1.0


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the node actually bound (ports resolved when the config said 0)."""

    listen: str
    publish: str


def _zmq() -> Any:
    # Imported lazily (CLI start-up stays light) and typed loosely: the project's mypy
    # config skips following zmq.
    return importlib.import_module("zmq")


def _bind(sock: Any, address: str) -> str:
    zmq = _zmq()

    if address.startswith("tcp://") and address.endswith(":0"):
        address = address[:-2] + ":*"
    sock.bind(address)
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)


class EdgeNode:
    """One edge node daemon; `start()` binds and spawns its threads, `stop()` joins them."""

    def __init__(
        self,
        cfg: EdgeConfig,
        model_path: str | Path,
        model_name: str = "",
        metrics: EdgeMetrics | None = None,
        runner: StagedRunner | None = None,
        labels: Sequence[str] = (),
        telemetry: TelemetrySource | None = None,
        repository: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics or EdgeMetrics()
        self.model_path = Path(model_path)
        self.model_name = model_name or cfg.model.name or self.model_path.stem
        self.runner = runner or open_staged(self.model_path, cfg, cfg.batching.max_batch)
        classes = _classes_of(self.runner)
        # Config first, then the repository manifest's, then the ONNX metadata.
        labels = model_labels(self.model_path, classes, cfg.model.labels or labels)
        self.detector = Detector(self.runner, labels, cfg.detection, cfg.runtime.preprocess_threads)
        max_batch = min(cfg.batching.max_batch, self.detector.max_batch)
        if max_batch < cfg.batching.max_batch:
            # A fixed-batch export (batch 1 is common) or an engine built for less.
            log.warning(
                "model %s takes at most %d frames per batch: batching.max_batch lowered "
                "from %d to %d",
                self.model_name,
                self.detector.max_batch,
                cfg.batching.max_batch,
                max_batch,
            )
        self.max_batch = max_batch
        # The batching policy (today's rule, or the learned one); the degradation
        # controller's cap applies on top of its choice.
        self.scheduler = make_policy(
            cfg.scheduler,
            max_batch,
            cfg.batching.min_batch,
            cfg.batching.delay_target_ms / 1e3,
            cfg.batching.adapt_every,
            cfg.batching.max_queue_delay_ms / 1e3,
        )
        self.sched_metrics = SchedulerMetrics(self.metrics.registry, self.scheduler.name)
        self.sched_window = SchedulerWindow(
            cfg.scheduler.sla_ms / 1e3,
            cfg.batching.max_cameras * cfg.batching.queue_per_camera,
        )
        self.metrics.batch_limit.set(max_batch)
        # GPU telemetry (absent without NVML) and the degradation triggers it drives.
        self.telemetry = GpuTelemetry(
            telemetry if telemetry is not None else open_nvml(), cfg.degradation.interval_s
        )
        self.metrics.registry.register(DcgmCollector(self.telemetry))
        on_gpu = self.runner.backend not in CPU_BACKENDS
        self.degradation = DegradationController(
            cfg.degradation, self.metrics.degradation, on_gpu=on_gpu
        )
        if not self.degradation.enabled:
            log.info(
                "degradation controller off (degradation.enabled: %s)", cfg.degradation.enabled
            )
        self._last: dict[
            str, tuple[FrameBoxes, frame_pb2.FrameDetections, TrackedBoxes | None]
        ] = {}
        self._busy_log = _RateLimitedLog("busy", 1.0)
        self._late_log = _RateLimitedLog("deadline", 1.0)
        # Seconds the last batch took (the deadline's estimate of the next one's).
        self._batch_s = 0.0
        self.queues = CameraQueues(cfg.batching.queue_per_camera)
        self.delivery = Delivery(cfg, max_batch, self.metrics)
        self.delivery.model_name = self.model_name
        side = self.detector.input_size
        self.delivery.model_input = (side, side)
        # GPU degradation level 3: devices get a share of their credit, and at least level 1.
        self.delivery.credits.scale = lambda: self.degradation.credit_scale
        self.delivery.credits.floor_level = lambda: self.degradation.device_level
        self.delivery.credits.batch_limit = lambda: self.degradation.batch_cap(
            self.scheduler.current().max_batch
        )
        # Read at scrape time: whether the granted credits are in use.
        self.metrics.credits.set_function(lambda: self.delivery.credits.total_credits)
        self.metrics.held.set_function(lambda: self.delivery.credits.held)
        ing = cfg.ingest
        self.ingest = Ingest(
            self.metrics,
            cfg.max_payload_mib << 20,
            cfg.batching.max_cameras,
            ImageLimits(ing.max_width, ing.max_height, ing.max_pixels),
            ing.camera_idle_s,
            ing.sessions_per_camera,
            precheck=self._precheck,
        )
        # Tracking, answers for skipped frames, H.264 streams and calibration.
        self.cascade = EdgeCascade(cfg, self.metrics.registry, self.detector.input_size)
        # Frames are decoded in the worker, only once taken for a batch.
        self.decoder = FrameDecoder(
            self.metrics, ing.decode_threads, self._undecodable, self.cascade.h264
        )
        self._auth: Any = None
        self._acks_out: Any = None  # the worker thread's end of the final-ack pipe
        self.uplink = Uplink(cfg.cloud, cfg.uplink, self.metrics) if cfg.cloud else None
        self.crops = (
            CropSelector(cfg.crops, labels, cfg.edge_id) if self.uplink is not None else None
        )
        # Run-time version switches of a repository model (edge/inference/versions.py).
        self.model_version = 0
        self.switcher: ModelSwitcher | None = None
        if repository is not None:
            repo = ModelRepository(repository or None)
            self.model_version = version_of(repo, self.model_name, self.model_path)
            self.switcher = ModelSwitcher(
                repo,
                self.model_name,
                self.model_version,
                cfg.versions,
                self._build_version,
                VersionMetrics(self.metrics.registry),
            )
        # Checkpoints of edge state (edge/state/checkpoint.py), restored before the threads start.
        self.checkpointer = Checkpointer(
            cfg.checkpoint,
            cfg.edge_id,
            self._checkpoint_body,
            CheckpointMetrics(self.metrics.registry),
        )
        restored = self.checkpointer.load()
        if restored is not None:
            self._restore(*restored)
        # Cameras moved here from a failed (or rebalanced) peer: the peer whose checkpoint
        # was restored for each (ingest thread only).
        self._taken_over: dict[str, str] = {}
        self._drained: set[str] = set()  # peers whose uplink spool was taken over
        self._stop = threading.Event()
        # Set when the worker has sent its last final ack: ingest forwards acks until then.
        self._worker_done = threading.Event()
        self._stopped = False
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._ctx: Any = None
        self.endpoints = Endpoints("", "")

    def _build_version(self, path: Path) -> tuple[StagedRunner, Detector]:
        """Runner and detector of another version of the serving model (loader thread)."""
        runner = open_staged(path, self.cfg, self.cfg.batching.max_batch)
        try:
            classes = _classes_of(runner)
            if classes != self.detector.classes:
                raise ModelLoadError(
                    f"{path}: {classes} classes, the serving version has {self.detector.classes}"
                )
            det = Detector(
                runner,
                self.detector.labels,
                self.cfg.detection,
                self.cfg.runtime.preprocess_threads,
            )
            if det.max_batch < self.max_batch:
                det.close()
                raise ModelLoadError(f"{path}: takes {det.max_batch} frames, not {self.max_batch}")
        except BaseException:
            runner.close()
            raise
        return runner, det

    def _switch(self, loaded: LoadedVersion) -> None:
        """Serve `loaded` from the next batch on (worker thread, nothing in flight)."""
        assert self.switcher is not None
        old_runner, old_detector, old = self.runner, self.detector, self.model_version
        self.runner, self.detector = loaded.model.runner, loaded.model.detector
        self.model_path, self.model_version = loaded.path, loaded.version
        self.switcher.switched(loaded, old)
        old_detector.close()
        old_runner.close()

    def _counters(self) -> list[Counter]:
        return [v for v in vars(self.metrics).values() if isinstance(v, Counter)]

    def _checkpoint_body(self) -> CheckpointBody:
        up = self.uplink
        return CheckpointBody(
            version=CHECKPOINT_VERSION,
            edge_id=self.cfg.edge_id,
            written_unix=time.time(),
            model=self.model_name,
            model_version=self.model_version,
            streams=[StreamCheckpoint.of(st) for st in self.delivery.ledger.snapshot()],
            trackers=[
                TrackerCheckpoint(session_id=session, camera_id=cam, state=state)
                for session, cam, state in self.cascade.answers.snapshot()
            ],
            counters=counter_values(self._counters()),
            uplink=UplinkCheckpoint(
                spool_path=str(Path(self.cfg.uplink.spool_path).resolve())
                if up is not None and self.cfg.uplink.spool_path
                else "",
                spooled=up.spooled if up is not None else 0,
                buffered=up.buffered if up is not None else 0,
            ),
        )

    def _restore(self, body: CheckpointBody, journal: list[SettledStream]) -> None:
        streams = [st.settled() for st in body.streams] + journal
        frames = self.delivery.ledger.restore(streams)
        sessions: dict[str, dict[int, int]] = {}
        for st in streams:
            if st.runs:
                cam = sessions.setdefault(st.camera_id, {})
                cam[st.session_id] = max(cam.get(st.session_id, 0), st.runs[-1].last)
        n_cams = self.ingest.restore({c: list(v.items()) for c, v in sessions.items()})
        trackers = self._restore_trackers(body.trackers)
        n_counters = restore_counters(self._counters(), body.counters)
        spool = self.uplink.spooled if self.uplink is not None else 0
        log.warning(
            "restored checkpoint of edge %s written %s: %d camera(s), %d settled frame(s) "
            "(%d from the journal after it), %d tracker(s), %d counter series, model %s "
            "version %d then (%d now); uplink spool holds %d crops (%d at the checkpoint)",
            body.edge_id,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(body.written_unix)),
            n_cams,
            frames,
            sum(r.last - r.first + 1 for st in journal for r in st.runs),
            trackers,
            n_counters,
            body.model,
            body.model_version,
            self.model_version,
            spool,
            body.uplink.spooled,
        )

    def _restore_trackers(self, trackers: list[TrackerCheckpoint]) -> int:
        n = 0
        for t in trackers:
            try:
                n += self.cascade.answers.restore(t.session_id, t.camera_id, t.state)
            except ValueError as exc:
                log.error(
                    "tracker of camera %s not restored (%s): it starts clean", t.camera_id, exc
                )
        return n

    # -- taking over cameras from another edge ------------------------------------------

    def _precheck(self, h: frame_pb2.FrameHeader) -> frame_pb2.FrameAck | None:
        """Delivery's precheck, after restoring a moved camera's state (ingest thread)."""
        prev = h.previous_edge
        if prev and prev != self.cfg.edge_id and self._taken_over.get(h.camera_id) != prev:
            self._take_over(h.camera_id, prev)
        return self.delivery.precheck(h)

    def _take_over(self, camera: str, peer: str) -> None:
        """Restore what `peer`'s checkpoint and journal hold for `camera` (it moved here):
        settled frames (their resends get their final status), its tracker, its
        per-camera counters; and drain the peer's uplink spool once if it is free."""
        self._taken_over[camera] = peer
        m = self.checkpointer.metrics
        try:
            state = self.checkpointer.load_peer(peer, {camera})
        except PeerCheckpointError as exc:
            m.taken_over.labels("refused").inc()
            log.error("camera %s moved here from edge %s: %s; it starts clean", camera, peer, exc)
            return
        if state is None:
            where = self.cfg.checkpoint.dir
            m.taken_over.labels("none").inc()
            log.info(
                "camera %s moved here from edge %s: no checkpoint of it%s; it starts clean",
                camera,
                peer,
                f" in {where}" if where else " (no checkpoint.dir set)",
            )
            return
        frames = self.delivery.ledger.restore(state.streams)
        trackers = self._restore_trackers([t for t in state.body.trackers if t.camera_id == camera])
        series = restore_counters(self._counters(), state.body.counters, {camera})
        # Its counters are carried on here now: the peer must not restore them again.
        self.checkpointer.mark_handed_over(peer, state.body.written_unix, camera)
        m.taken_over.labels("checkpoint").inc()
        m.taken_over_frames.inc(frames)
        log.warning(
            "camera %s moved here from edge %s: restored its checkpoint (written %s) and "
            "journal: %d settled frame(s) (%d journaled), %d tracker(s), %d counter series",
            camera,
            peer,
            time.strftime("%H:%M:%S", time.localtime(state.body.written_unix))
            if state.body.written_unix
            else "never",
            frames,
            state.journal_frames,
            trackers,
            series,
        )
        spool = state.body.uplink.spool_path
        if spool and self.uplink is not None and peer not in self._drained:
            self._drained.add(peer)
            self.uplink.adopt_spool(spool, peer, m.adopted_crops)

    def request_model_check(self) -> None:
        """Look for a newer model version now (SIGHUP)."""
        if self.switcher is not None:
            self.switcher.request()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Endpoints:
        """Bind both sockets and start the threads; returns the bound addresses."""
        zmq = _zmq()

        self._ctx = zmq.Context()
        router = self._ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        # What a peer can make the node hold: a part over the payload limit drops the
        # connection as soon as its length is read (nothing allocated), and at most
        # receive_hwm messages wait per peer before ZeroMQ stops reading its connection.
        router.setsockopt(zmq.MAXMSGSIZE, self.cfg.max_payload_mib << 20)
        router.setsockopt(zmq.RCVHWM, self.cfg.ingest.receive_hwm)
        if self.cfg.curve.secret_key:
            self._auth = serve_curve(
                self._ctx, router, self.cfg.curve.secret_key, self.cfg.curve.clients_dir
            )
        pub = self._ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        # Final acks from the worker to the ingest thread (the ROUTER's owner).
        acks_in = self._ctx.socket(zmq.PULL)
        acks_in.setsockopt(zmq.LINGER, 0)
        acks_out = self._ctx.socket(zmq.PUSH)
        acks_out.setsockopt(zmq.LINGER, 0)
        acks_out.setsockopt(zmq.SNDHWM, 0)  # bounded anyway: one per frame taken
        # A PUSH with no PULL left blocks forever; a backstop in case ingest died first.
        acks_out.setsockopt(zmq.SNDTIMEO, ACK_PIPE_TIMEOUT_MS)
        try:
            listen = _bind(router, self.cfg.listen)
            publish = _bind(pub, self.cfg.publish)
            acks_in.bind(f"inproc://final-acks-{id(self)}")
            acks_out.connect(f"inproc://final-acks-{id(self)}")
        except zmq.ZMQError:
            for sock in (router, pub, acks_in, acks_out):
                sock.close()
            if self._auth is not None:
                self._auth.stop()
            self._ctx.term()
            raise
        self.endpoints = Endpoints(listen, publish)
        if self.uplink is not None:
            self.uplink.start()
        self._threads = [
            threading.Thread(
                target=self._ingest_loop, args=(router, acks_in), name="edge-ingest", daemon=True
            ),
            threading.Thread(
                target=self._worker_loop, args=(pub, acks_out), name="edge-worker", daemon=True
            ),
        ]
        for t in self._threads:
            t.start()
        log.info(
            "edge node %s: frames on %s, detections on %s, model %s (%s), cloud %s",
            self.cfg.edge_id,
            listen,
            publish,
            self.model_name,
            self.runner.backend,
            self.cfg.cloud or "off",
        )
        return self.endpoints

    def stop(self, join_timeout_s: float = 10.0) -> None:
        """Stop threads, close sockets and the runner, and report buffers not returned.
        A second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        self.queues.close()
        for t in self._threads:
            t.join(timeout=join_timeout_s)
        stuck = [t.name for t in self._threads if t.is_alive()]
        if self.switcher is not None:
            self.switcher.stop()
        if self.uplink is not None:
            self.uplink.stop()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if stuck:
            # The worker may still be inside a launch or a wait: freeing its pinned and
            # device buffers now could let a copy or kernel write into freed memory.
            self.metrics.unclean_stops.inc()
            log.error(
                "threads %s still running %.0f s after stop: the runner and its buffers are "
                "left allocated (the process should exit); where they are:\n%s",
                ", ".join(stuck),
                join_timeout_s,
                _stacks(t for t in self._threads if t.is_alive()),
            )
            return
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
        self.checkpointer.save()
        self.checkpointer.close()
        save_policy(self.scheduler, self.cfg.scheduler)
        self.cascade.close()
        self.detector.close()
        self.decoder.close()
        self.runner.close()
        owner = getattr(self.runner, "pool_owner", None)
        if owner is not None:
            leaks = report_leaks(owner)
            if leaks:
                self.metrics.memory_leaks.inc(leaks)
        close_nvml = getattr(self.telemetry.source, "close", None)
        if callable(close_nvml):
            close_nvml()  # nvmlShutdown balances this node's nvmlInit

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (or timeout); True when stopped."""
        return self._stop.wait(timeout)

    @property
    def error(self) -> BaseException | None:
        """What stopped a thread, if one died."""
        return self._error

    # -- ingest ----------------------------------------------------------------------------

    def _ingest_loop(self, router: Any, acks_in: Any) -> None:
        zmq = _zmq()

        monitor = PeerMonitor(router, self.metrics)
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(acks_in, zmq.POLLIN)
        poller.register(monitor.sock, zmq.POLLIN)
        next_sweep = time.monotonic() + SWEEP_S
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(POLL_MS))
                if time.monotonic() >= next_sweep:
                    self._forget_idle()
                    next_sweep = time.monotonic() + SWEEP_S
                if monitor.sock in ready:
                    monitor.poll()
                if acks_in in ready:
                    self._forward_final_acks(router, acks_in)
                if router in ready:
                    self._receive(router)
                    self.metrics.queue_depth.set(len(self.queues))
                    self.metrics.cameras.set(self.queues.cameras)
            # Stopping: no new frames, but the batches in flight still finish, and their
            # final acks must reach the agents (an unsent one is a needless resend).
            while not self._worker_done.wait(POLL_MS / 1e3):
                self._forward_final_acks(router, acks_in)
            self._forward_final_acks(router, acks_in)
        except Exception as exc:
            self._error = exc
            log.exception("ingest thread failed")
            self._stop.set()
        finally:
            monitor.close()
            router.close()
            acks_in.close()

    def _forward_final_acks(self, router: Any, acks_in: Any) -> None:
        zmq = _zmq()

        while True:
            try:
                parts = acks_in.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                router.send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:  # the agent's pipe is full: it resends, and hears then
                self.metrics.drops.labels("ack_unsent").inc()

    def _receive(self, router: Any) -> None:
        zmq = _zmq()

        # Bounded per wake-up, so final acks (and the credits they free) are not starved.
        for _ in range(256):
            try:
                parts = router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            identity = parts[0]
            if len(parts) == 3 and not len(parts[2]) and self._heartbeat(router, parts):
                continue
            result = self.ingest.handle(parts[1:], identity)
            ack = result.ack
            if result.frame is not None:
                h = result.frame.header
                admitted = self.delivery.admit(h)
                ack = admitted.ack
                if ack.status == QUEUED:
                    self.cascade.decorate(ack, h)
                    frame = replace(
                        result.frame,
                        identity=bytes(memoryview(identity)),
                        redelivery=admitted.redelivery,
                    )
                    if not self._route(frame):
                        ack = self.delivery.refuse(h)
            if ack.status == frame_pb2.ACK_STATUS_BUSY:
                self._busy_log.warn(
                    "camera %s over its credit of %d: BUSY (retry after %d ms)",
                    ack.camera_id,
                    ack.credits,
                    ack.retry_after_ms,
                )
            try:
                router.send_multipart([identity, ack.SerializeToString()], zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self.metrics.drops.labels("ack_unsent").inc()

    def _route(self, frame: QueuedFrame) -> bool:
        """A skipped frame waits for its answer from tracking; a kept one for the detector.
        False: the camera's queue is full (the frame is not taken)."""
        h = frame.header
        if h.kind == frame_pb2.FRAME_KIND_SKIPPED:
            self.cascade.skipped(h, frame.received, frame.receive_ns, frame)
            return True
        self.cascade.expect(h)
        if self.queues.put(frame):
            return True
        self.cascade.abandon(h)
        return False

    def _undecodable(self, frame: QueuedFrame, reason: str, detail: str) -> None:
        """A frame taken for a batch did not decode (counted and logged by the decoder)."""
        self.cascade.abandon(frame.header)
        if reason.startswith("h264"):
            self.cascade.lost_h264(frame.header, reason)
        self.finalize(frame, REJECTED, f"{reason}: {detail}")

    def finalize(self, frame: QueuedFrame, status: int, reason: str = "") -> None:
        """Send a taken frame's final ack (worker thread only; it leaves through ingest)."""
        h = frame.header
        ack = self.delivery.settle(h, status, reason)
        self.checkpointer.settled(h.session_id, h.camera_id, h.sequence, status, reason)
        if status != PROCESSED:
            self.metrics.frames.labels(frame_pb2.AckStatus.Name(status)[11:].lower()).inc()
        try:
            self._acks_out.send_multipart([frame.identity, ack.SerializeToString()])
        except _zmq().Again:
            self.metrics.drops.labels("ack_unsent").inc()
            log.warning(
                "final ack of %s #%d not sent: the ingest thread is gone (the agent resends)",
                frame.header.camera_id,
                frame.header.sequence,
            )

    def _heartbeat(self, router: Any, parts: Sequence[Any]) -> bool:
        """Answer an agent's heartbeat (header only, FRAME_KIND_HEARTBEAT) with EdgeInfo;
        False for anything else, which ingest checks as usual."""
        zmq = _zmq()
        header = heartbeat_of(parts[1:])
        if header is None:
            return False
        ack = self.delivery.heartbeat(header)
        try:
            router.send_multipart([parts[0], ack.SerializeToString()], zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.metrics.drops.labels("ack_unsent").inc()
        return True

    def _forget_idle(self) -> None:
        self.cascade.forget_idle(self.cfg.ingest.camera_idle_s)
        idle = self.ingest.idle_cameras()
        if not idle:
            return
        # A camera whose frames still wait in its queue keeps its slot until they leave.
        gone = self.queues.forget(idle)
        self.ingest.forget(gone)
        self.delivery.forget_cameras(gone)
        for cam in gone:
            self.metrics.forget_camera(cam)
            self._taken_over.pop(cam, None)
            self._last.pop(cam, None)
        if gone:
            self.metrics.cameras_forgotten.inc(len(gone))
            self.metrics.cameras.set(self.queues.cameras)
            log.info(
                "forgot %d camera(s) silent for over %.0f s (e.g. %r)",
                len(gone),
                self.cfg.ingest.camera_idle_s,
                gone[0],
            )

    # -- detect and publish ----------------------------------------------------------------

    def _worker_loop(self, pub: Any, acks_out: Any) -> None:
        self._acks_out = acks_out
        inflight: deque[InFlight] = deque()
        window_start, window_frames = time.monotonic(), 0
        sched = DecisionClock(
            self.scheduler,
            self.sched_window,
            self.cfg.scheduler.decide_every_s,
            lambda: len(self.queues),
            # The queues of the cameras seen, not of every camera the node may take.
            lambda: max(1, self.queues.cameras) * self.cfg.batching.queue_per_camera,
            self._power_w,
            self.sched_metrics,
        )
        # Busy time (for the capacity estimate): wall time minus waits with nothing to do.
        mark, idle = time.monotonic(), 0.0
        try:
            while not self._stop.is_set() or inflight:
                t0 = time.monotonic()
                frames = (
                    []
                    if self._stop.is_set()
                    else self.queues.next_batch(
                        self.degradation.batch_cap(self.scheduler.current().max_batch),
                        self.scheduler.current().max_delay_s,
                        0.0 if inflight else POLL_MS / 1e3,
                    )
                )
                if not inflight:
                    waited = time.monotonic() - t0
                    idle += waited
                    self.metrics.worker_idle.inc(waited)
                    if not frames:
                        self.delivery.credits.decay_delay()
                if frames and self.cfg.scheduler.deadline_shed:
                    frames = self._shed_late(frames)
                if frames and self.degradation.level >= 4:
                    frames = self._answer_from_cache(pub, frames)
                if frames:
                    now = time.monotonic()
                    delays = [now - f.received for f in frames]
                    for d in delays:
                        self.metrics.queue_delay.observe(d)
                    self.metrics.queue_depth.set(len(self.queues))
                    decoded = self.decoder.decode(frames)
                    if decoded:
                        self.metrics.batch_size.observe(len(decoded))
                        inflight.append(self.detector.launch(decoded, time.time_ns()))
                    self.scheduler.on_batch(delays)
                    self.sched_window.add_batch(len(frames))
                    self.metrics.batch_limit.set(self.scheduler.current().max_batch)
                if inflight and (len(inflight) >= self.runner.slots or not frames):
                    job = inflight.popleft()
                    done = self._finish(pub, job)
                    window_frames += done
                    now = time.monotonic()
                    self.delivery.credits.observe_batch(
                        done,
                        max(1e-6, now - mark - idle),
                        [job.launched - f.frame.received for f in job.frames],
                    )
                    mark, idle = now, 0.0
                if self.switcher is not None:
                    self.switcher.poll()
                    # Between two batches: nothing in flight on the old runner.
                    loaded = None if inflight else self.switcher.ready()
                    if loaded is not None:
                        self._switch(loaded)
                for answer in self.cascade.ready():
                    self._publish_answer(pub, answer)
                now = time.monotonic()
                if now - window_start >= 1.0:
                    self.metrics.fps.set(window_frames / (now - window_start))
                    self.metrics.capacity.set(self.delivery.credits.capacity.fps)
                    self.metrics.pressure.set(self.delivery.credits.pressure)
                    window_start, window_frames = now, 0
                    self._gpu_memory()
                if self.degradation.due():
                    self.degradation.tick(self.telemetry.samples())
                sched.tick()
                self.checkpointer.tick()
        except Exception as exc:
            self._error = exc
            log.exception("worker thread failed")
            self._stop.set()
        finally:
            self._worker_done.set()
            pub.close()
            acks_out.close()

    def _shed_late(self, frames: list[QueuedFrame]) -> list[QueuedFrame]:
        """`scheduler.deadline_shed`: the frames of a batch that can still finish within
        the SLA of their arrival (the batch is assumed to take as long as the last one);
        the others get SHED, reason deadline, counted and logged."""
        sla = self.cfg.scheduler.sla_ms / 1e3
        now = time.monotonic()
        budget = sla - self._batch_s
        keep = []
        for f in frames:
            waited = now - f.received
            if waited <= budget:
                keep.append(f)
                continue
            self.cascade.abandon(f.header)
            self.sched_window.add_shed()
            self.finalize(
                f,
                SHED,
                f"deadline: waited {waited * 1e3:.0f} ms, a batch takes {self._batch_s * 1e3:.0f}"
                f" ms, SLA {sla * 1e3:.0f} ms",
            )
            self._late_log.warn(
                "camera %s #%d shed: waited %.0f ms, would finish past the %.0f ms SLA",
                f.header.camera_id,
                f.header.sequence,
                waited * 1e3,
                sla * 1e3,
            )
        if not keep:
            # Nothing runs, so nothing would measure a batch again: the next one is not
            # judged by this estimate (a slow first batch must not shed every frame after).
            self._batch_s = 0.0
        return keep

    def _power_w(self) -> float | None:
        """The GPUs' power draw (NVML); None without a GPU that reports it."""
        watts = [s.power_w for s in self.telemetry.samples() if s.power_w is not None]
        return sum(watts) if watts else None

    def _gpu_memory(self) -> None:
        used = getattr(self.runner, "memory_used", None)
        if callable(used):
            self.metrics.gpu_memory.set(float(used()))

    def _finish(self, pub: Any, job: InFlight) -> int:
        results = self.detector.finish(job)
        end_ns = time.time_ns()
        elapsed = job.elapsed()
        self._batch_s = elapsed
        self.metrics.inference.observe(elapsed)
        self.degradation.observe_inference(elapsed)
        share = elapsed / max(1, len(job.frames))
        for frame in job.frames:
            cam = frame.header.camera_id
            self.metrics.camera_gpu_seconds.labels(cam).inc(share)
            self.metrics.camera_bytes.labels(cam, "in").inc(frame.header.payload_size)
        for frame, boxes in zip(job.frames, results, strict=True):
            # Boxes go out in the source frame's pixels with their track ids; the skipped
            # frames this detection completes are answered right after it, in order.
            tracked, answers = self.cascade.detected(frame.header, boxes)
            self._publish(
                pub,
                frame,
                tracked.as_frame_boxes(),
                job.start_ns,
                end_ns,
                tracked=tracked,
                image_boxes=boxes,
            )
            # Published first, acked second: a crash in between means a resend, flagged
            # as a redelivery by the next life of the node, never a lost frame.
            self.finalize(frame.frame, PROCESSED)
            for answer in answers:
                self._publish_answer(pub, answer)
        if self.switcher is not None:
            self.switcher.remember(job.frames, results)
        done = time.monotonic()
        self.sched_window.add_latencies([done - f.frame.received for f in job.frames])
        return len(results)

    def _answer_from_cache(self, pub: Any, frames: list[QueuedFrame]) -> list[QueuedFrame]:
        """Level 4: publish low-priority cameras' last result for their frames (flagged
        predicted, no inference); returns the frames that still need the detector."""
        rest = []
        for f in frames:
            cam = f.header.camera_id
            last = self._last.get(cam)
            if last is None or not self.degradation.from_cache(cam):
                rest.append(f)
                continue
            self.metrics.queue_delay.observe(time.monotonic() - f.received)
            self.degradation.metrics.skipped.labels("cached_result").inc()
            now = time.time_ns()
            # Never decoded: a predicted answer needs no pixels (and sends no crops).
            self.cascade.abandon(f.header)
            self._publish(
                pub, DecodedFrame(f, _NO_IMAGE), last[0], now, now, predicted=True, tracked=last[2]
            )
            self.finalize(f, PROCESSED)  # its (degraded) result is published
        return rest

    def _publish(
        self,
        pub: Any,
        decoded: DecodedFrame,
        boxes: FrameBoxes,
        start_ns: int,
        end_ns: int,
        predicted: bool = False,
        tracked: TrackedBoxes | None = None,
        image_boxes: FrameBoxes | None = None,
    ) -> None:
        """Publish one frame's result; `boxes` in source pixels, `image_boxes` the same in
        the decoded image's pixels (what crops are cut with)."""
        frame = decoded.frame
        h = frame.header
        msg = self._result(h, predicted, "degraded" if predicted else "", frame.redelivery)
        ids = tracked.track_ids.tolist() if tracked is not None else [0] * len(boxes)
        self._add_detections(msg, boxes, ids)
        t = msg.timing
        t.capture_ns, t.device_send_ns, t.edge_receive_ns = (
            h.capture_ns,
            h.send_ns,
            frame.receive_ns,
        )
        t.inference_start_ns, t.inference_end_ns = start_ns, end_ns
        t.edge_send_ns = time.time_ns()
        pub.send_multipart([detections_topic(h.camera_id), msg.SerializeToString()])
        self.metrics.processed.inc()
        if frame.redelivery:
            self.metrics.redelivered.inc()
        self.metrics.camera_frames.labels(h.camera_id).inc()
        if not predicted:
            self._last[h.camera_id] = (boxes, msg, tracked)
        self.metrics.detections.inc(len(boxes))
        self.metrics.node_latency.observe(time.monotonic() - frame.received)
        if h.capture_ns:
            self.metrics.e2e.observe(max(0.0, (t.edge_send_ns - h.capture_ns) / 1e9))
        if self.uplink is not None and self.crops is not None and len(boxes) and not predicted:
            if not self.degradation.crops_enabled:
                self.degradation.metrics.skipped.labels("cloud_crops").inc()
                return
            cut = image_boxes if image_boxes is not None else boxes
            crops = self.crops.crops(decoded, cut, msg.detections, tracked)
            for c in crops:
                c.timing.CopyFrom(t)
            self.metrics.camera_bytes.labels(h.camera_id, "uplink").inc(
                sum(len(c.image) for c in crops)
            )
            self.uplink.offer(crops)

    def _result(
        self, h: frame_pb2.FrameHeader, predicted: bool, note: str = "", redelivery: bool = False
    ) -> frame_pb2.FrameDetections:
        """A result message for this frame, without its detections and timing."""
        return frame_pb2.FrameDetections(
            version=current_version(),
            edge_id=self.cfg.edge_id,
            camera_id=h.camera_id,
            sequence=h.sequence,
            frame_index=h.frame_index,
            width=h.source_width or h.width,
            height=h.source_height or h.height,
            model=self.model_name,
            model_version=self.model_version,
            predicted=predicted,
            session_id=h.session_id,
            redelivery=redelivery,
            note=note,
        )

    def _add_detections(
        self,
        msg: frame_pb2.FrameDetections,
        boxes: FrameBoxes | TrackedBoxes,
        track_ids: list[int],
    ) -> None:
        labels = self.detector.labels
        nlab = len(labels)
        # Serialization is per box by nature of the message; the numbers go over in bulk.
        for (x1, y1, x2, y2), score, cid, tid in zip(
            boxes.boxes.tolist(),
            boxes.scores.tolist(),
            boxes.class_ids.tolist(),
            track_ids,
            strict=True,
        ):
            d = msg.detections.add(score=score, class_id=cid, track_id=tid)
            d.box.x1, d.box.y1, d.box.x2, d.box.y2 = x1, y1, x2, y2
            d.label = labels[cid] if 0 <= cid < nlab else str(cid)

    def _publish_answer(self, pub: Any, a: Answer) -> None:
        """A skipped frame's result, from the tracker (flagged predicted; no crops)."""
        h = a.header
        msg = self._result(h, True, f"skipped:{h.skip_reason or 'unspecified'}:{a.how}")
        self._add_detections(msg, a.boxes, a.boxes.track_ids.tolist())
        t = msg.timing
        t.capture_ns, t.device_send_ns, t.edge_receive_ns = h.capture_ns, h.send_ns, a.receive_ns
        t.edge_send_ns = time.time_ns()
        pub.send_multipart([detections_topic(h.camera_id), msg.SerializeToString()])
        self.metrics.camera_frames.labels(h.camera_id).inc()
        if isinstance(a.token, QueuedFrame):  # the skipped notice is settled: published
            self.finalize(a.token, PROCESSED)


def _classes_of(runner: StagedRunner) -> int:
    """Classes of a YOLO output [N, 4 + classes, anchors]; a dummy run when dynamic."""
    out_shape = runner.outputs[0].shape
    classes = (out_shape[1] or 0) - 4 if len(out_shape) == 3 else 0
    if classes > 0:
        return classes
    slot = runner.acquire()
    runner.host_input(slot)[:1] = 0
    runner.launch(slot, 1)
    out = runner.wait(slot, 1)[0]
    if out.ndim != 3 or out.shape[1] < 5:
        raise ModelLoadError(f"not a YOLO detection output: shape {out.shape}")
    return int(out.shape[1]) - 4


class _RateLimitedLog:
    """A warning at most once per `period` seconds, with how many were folded into it."""

    def __init__(self, name: str, period: float) -> None:
        self.name = name
        self.period = period
        self._last = 0.0
        self._folded = 0

    def warn(self, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.period:
            self._folded += 1
            return
        if self._folded:
            fmt += f" (+{self._folded} more since the last line)"
        log.warning(fmt, *args)
        self._last, self._folded = now, 0


def _stacks(threads: Iterable[threading.Thread]) -> str:
    """The current Python stack of each thread, for a log line about a stuck stop."""
    frames = sys._current_frames()
    out = []
    for t in threads:
        frame = frames.get(t.ident) if t.ident is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
        out.append(f"{t.name}:\n{stack}")
    return "".join(out)
