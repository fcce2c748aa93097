"""The edge node: wires the stages (built by strata.edge.build.build_node) to their
sockets and threads.

A frame's way, stage by stage: ingest (strata.edge.drivers.ingest_loop: ROUTER, checks,
heartbeats) -> flow (delivery, credits, the per-camera queues) -> inference (the worker,
strata.edge.drivers.worker: batching, detector) -> tracking (and answers for skipped
frames) -> the stages after tracking (strata.edge.tracking.handoff: the rules stage,
strata.edge.rules.stage) -> publish (results and track events on the PUB socket, final
acks, crops) -> uplink (crops and track events to the cloud). State (checkpoint,
journal, takeover) sits beside them; overload (strata.edge.overload) acts along the way.

ZeroMQ sockets are not thread-safe, so each belongs to one thread: the ROUTER to ingest,
the PUB to the worker. Frames cross from ingest to the worker through the per-camera
queues; final acks cross back through an inproc PUSH/PULL pair, so only the ingest thread
ever writes to the ROUTER. A frame's final ack (PROCESSED) leaves only after its result
was published (see strata.edge.flow.delivery for the whole ack lifecycle).
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from strata.edge.drivers.ingest_loop import IngestLoop
from strata.edge.drivers.worker import Worker
from strata.edge.flow.delivery import Delivery
from strata.edge.flow.queues import CameraQueues
from strata.edge.inference.decode import FrameDecoder
from strata.edge.inference.scheduler import BatchPolicy, save_policy
from strata.edge.inference.serving import ServingModel
from strata.edge.ingest.intake import Ingest
from strata.edge.metrics import EdgeMetrics
from strata.edge.overload.gpu_pressure import GpuPressure
from strata.edge.publish.clip_demand import ClipDemand
from strata.edge.publish.results import Results
from strata.edge.rules.stage import RulesStage
from strata.edge.security import check_binds, secure
from strata.edge.state.checkpoint import Checkpointer
from strata.edge.tracking.cascade import EdgeCascade
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import EdgeConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.curve import CurveError
from strata.shared.gpu_telemetry import GpuTelemetry
from strata.shared.runtime.pool import report_leaks

log = logging.getLogger(__name__)

# How long the worker waits to hand a final ack to the ingest thread before counting it unsent.
ACK_PIPE_TIMEOUT_MS = 2000


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the node actually bound (ports resolved when the config said 0)."""

    listen: str
    publish: str


# Built by keyword only: too many fields to match by position.
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStages:
    """Everything `build_node` built, by stage; the node only runs them."""

    cfg: EdgeConfig
    metrics: EdgeMetrics
    ingest: Ingest
    ingest_loop: IngestLoop
    delivery: Delivery
    queues: CameraQueues
    serving: ServingModel
    policy: BatchPolicy
    decoder: FrameDecoder
    worker: Worker
    cascade: EdgeCascade
    rules: RulesStage
    results: Results
    uplink: Uplink | None
    checkpointer: Checkpointer
    gpu_pressure: GpuPressure
    telemetry: GpuTelemetry
    # Set by the stop; the worker's when it sent its last final ack.
    stop: threading.Event
    worker_done: threading.Event
    # The clip demand sent to the devices (edge.clips; None: off).
    clips: ClipDemand | None = None


@dataclass(slots=True)
class _Sockets:
    router: Any
    pub: Any
    acks_in: Any
    acks_out: Any

    def close(self) -> None:
        for sock in (self.router, self.pub, self.acks_in, self.acks_out):
            sock.close()


def _bind(sock: Any, address: str) -> str:
    if address.startswith("tcp://") and address.endswith(":0"):
        address = address[:-2] + ":*"
    sock.bind(address)
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)


class EdgeNode:
    """One edge node daemon; `start()` binds and spawns its threads, `stop()` joins them.
    Built by strata.edge.build.build_node."""

    def __init__(self, stages: NodeStages) -> None:
        self.stages = stages
        self.cfg = stages.cfg
        self.metrics = stages.metrics
        self._stop = stages.stop
        self._stopped = False
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._ctx: Any = None
        self._auth: Any = None
        self.endpoints = Endpoints("", "")

    # What tests and tools look at, by stage.
    @property
    def ingest(self) -> Ingest:
        return self.stages.ingest

    @property
    def delivery(self) -> Delivery:
        return self.stages.delivery

    @property
    def queues(self) -> CameraQueues:
        return self.stages.queues

    @property
    def decoder(self) -> FrameDecoder:
        return self.stages.decoder

    @property
    def scheduler(self) -> BatchPolicy:
        return self.stages.policy

    @property
    def gpu_pressure(self) -> GpuPressure:
        return self.stages.gpu_pressure

    @property
    def results(self) -> Results:
        return self.stages.results

    @property
    def uplink(self) -> Uplink | None:
        return self.stages.uplink

    @property
    def checkpointer(self) -> Checkpointer:
        return self.stages.checkpointer

    @property
    def runner(self) -> Any:
        return self.stages.serving.runner

    @property
    def model_path(self) -> Path:
        return self.stages.serving.path

    @property
    def max_batch(self) -> int:
        return self.stages.serving.max_batch

    @property
    def rules(self) -> RulesStage:
        return self.stages.rules

    @property
    def clip_demand(self) -> ClipDemand | None:
        return self.stages.clips

    def reconfigure_rules(self, cfg: RulesConfig) -> None:
        """New rules (SIGHUP), taking effect between two frames; UnknownLabelError (the
        old rules stay) when they name a label the model lacks."""
        self.stages.rules.reconfigure(cfg)
        log.warning("rules reloaded: camera(s) %s", ", ".join(sorted(cfg.cameras)) or "none")

    def request_model_check(self) -> None:
        """Look for a newer model version now (SIGHUP)."""
        if self.stages.serving.switcher is not None:
            self.stages.serving.switcher.request()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Endpoints:
        """Bind both sockets and start the threads; returns the bound addresses.
        EdgeSecurityError (before anything binds) for plaintext off loopback."""
        check_binds(self.cfg)
        self._ctx = zmq.Context()
        socks = self._sockets()
        try:
            self._auth = secure(self._ctx, socks.router, socks.pub, self.cfg, self.metrics)
            listen = _bind(socks.router, self.cfg.listen)
            publish = _bind(socks.pub, self.cfg.publish)
            socks.acks_in.bind(f"inproc://final-acks-{id(self)}")
            socks.acks_out.connect(f"inproc://final-acks-{id(self)}")
        except (zmq.ZMQError, CurveError):
            socks.close()
            if self._auth is not None:
                self._auth.stop()
            self._ctx.term()
            raise
        self.endpoints = Endpoints(listen, publish)
        if self.uplink is not None:
            self.uplink.start()
        s = self.stages
        self._threads = [
            self._thread("ingest", s.ingest_loop.run, socks.router, socks.acks_in),
            self._thread("worker", s.worker.run, socks.pub, socks.acks_out),
        ]
        for t in self._threads:
            t.start()
        log.info(
            "edge node %s: frames on %s, detections on %s, model %s (%s), cloud %s",
            self.cfg.edge_id,
            listen,
            publish,
            s.serving.name,
            s.serving.runner.backend,
            self.cfg.cloud or "off",
        )
        return self.endpoints

    def _sockets(self) -> _Sockets:
        ctx, cfg = self._ctx, self.cfg
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        # What a peer can make the node hold: a part over the payload limit drops the
        # connection as soon as its length is read (nothing allocated), and at most
        # receive_hwm messages wait per peer before ZeroMQ stops reading its connection.
        router.setsockopt(zmq.MAXMSGSIZE, cfg.max_payload_mib << 20)
        router.setsockopt(zmq.RCVHWM, cfg.ingest.receive_hwm)
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        # Final acks from the worker to the ingest thread (the ROUTER's owner).
        acks_in = ctx.socket(zmq.PULL)
        acks_in.setsockopt(zmq.LINGER, 0)
        acks_out = ctx.socket(zmq.PUSH)
        acks_out.setsockopt(zmq.LINGER, 0)
        acks_out.setsockopt(zmq.SNDHWM, 0)  # bounded anyway: one per frame taken
        # A PUSH with no PULL left blocks forever; a backstop in case ingest died first.
        acks_out.setsockopt(zmq.SNDTIMEO, ACK_PIPE_TIMEOUT_MS)
        return _Sockets(router, pub, acks_in, acks_out)

    def _thread(
        self, name: str, body: Callable[[Any, Any], None], a: Any, b: Any
    ) -> threading.Thread:
        """A thread running `body(a, b)`: a failure stops the node (kept in `error`); its
        sockets close when it ends; the worker's end lets ingest finish."""

        def run() -> None:
            try:
                body(a, b)
            except Exception as exc:
                self._error = exc
                log.exception("%s thread failed", name)
                self._stop.set()
            finally:
                if name == "worker":
                    self.stages.worker_done.set()
                a.close()
                b.close()

        return threading.Thread(target=run, name=f"edge-{name}", daemon=True)

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
        if self.stages.serving.switcher is not None:
            self.stages.serving.switcher.stop()
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
        self._close()

    def _close(self) -> None:
        """Save state and free the stages' resources (all threads joined)."""
        s = self.stages
        s.checkpointer.save()
        s.checkpointer.close()
        save_policy(s.policy, self.cfg.scheduler)
        s.cascade.close()
        s.serving.detector.close()
        s.decoder.close()
        runner = s.serving.runner
        runner.close()
        owner = getattr(runner, "pool_owner", None)
        if owner is not None:
            leaks = report_leaks(owner)
            if leaks:
                self.metrics.memory_leaks.inc(leaks)
        close_nvml = getattr(s.telemetry.source, "close", None)
        if callable(close_nvml):
            close_nvml()  # nvmlShutdown balances this node's nvmlInit

    def request_stop(self) -> None:
        """Ask the threads to stop (a signal handler's part; `stop` then joins them)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (or timeout); True when stopped."""
        return self._stop.wait(timeout)

    @property
    def error(self) -> BaseException | None:
        """What stopped a thread, if one died."""
        return self._error


def _stacks(threads: Iterable[threading.Thread]) -> str:
    """The current Python stack of each thread, for a log line about a stuck stop."""
    frames = sys._current_frames()
    out = []
    for t in threads:
        frame = frames.get(t.ident) if t.ident is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
        out.append(f"{t.name}:\n{stack}")
    return "".join(out)
