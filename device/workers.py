"""Cameras spread over worker processes (`device.processes`), one whole agent in each.

A worker is an `Agent` (decoders, gates, sender, spool) over its share of the cameras, so
the camera threads of one process never wait for another's interpreter lock: at many
cameras on few cores that wait, not the CPU, is what held one process back
(docs/device.md, "Many cameras").

Invariant: a camera runs in exactly one worker and stays in it, across reloads and
restarts, so its spool and its edge session follow it. The supervisor talks to each worker
over a pipe: metrics on request (merged into one /metrics), reloads, and one `WorkerReport`
when the worker ends. A worker that dies without its report is started again with its
cameras after a backoff (`strata_device_worker_restarts_total`, a log line).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from strata.shared.config.common import LoggingConfig
from strata.shared.config.device import CameraConfig, DeviceConfig

from .camera import CameraState, CameraStatus

log = logging.getLogger(__name__)

# How long the supervisor waits for a worker to answer a request, or to start.
_ANSWER_S = 10.0
_START_S = 120.0
_BACKOFF_S = (1.0, 30.0)


# Cameras a process takes under `processes: 0` before the next one starts: below this
# many a process's interpreter lock is not what limits it (docs/device.md, "Many cameras").
CAMERAS_PER_PROCESS = 8


def worker_count(cfg: DeviceConfig, cores: int | None = None) -> int:
    """Processes the cameras run in: `processes`, or under 0 (auto) one per 8 cameras, at
    most one per core; never more than one per camera."""
    cores = cores or os.cpu_count() or 1
    n = cfg.processes or min(cores, len(cfg.cameras) // CAMERAS_PER_PROCESS)
    return max(1, min(n, len(cfg.cameras)))


def burst_share(limit: int, workers: int, index: int, cores: int | None = None) -> int:
    """Worker `index`'s part of the host's calibration burst slots (`limit`, 0: one per
    core), dealt out so the host's bursts stay within the limit; at least one a worker, or
    its due bursts would never start."""
    total = limit or cores or os.cpu_count() or 1
    return max(1, total // workers + (index < total % workers))


def spread(ids: Sequence[str], workers: int) -> list[list[str]]:
    """Camera ids dealt to workers in turn (balanced: the config's order, round robin)."""
    return [list(ids[i::workers]) for i in range(workers)]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker process is started with."""

    index: int
    config: DeviceConfig
    models_repository: str
    logging: LoggingConfig
    # The other workers' cameras: worker 0 also takes back clips of cameras no worker runs.
    others: frozenset[str] = frozenset()

    def owns_clips_of(self, camera_id: str) -> bool:
        """Whether this worker uploads what a previous run left of `camera_id`'s clips."""
        mine = any(c.id == camera_id for c in self.config.cameras)
        return mine or (self.index == 0 and camera_id not in self.others)


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """A worker's last word: its cameras' states and worst lags, and its final metrics."""

    index: int
    statuses: tuple[CameraStatus, ...]
    worst_lag_s: dict[str, float]
    metrics: bytes


@dataclass(frozen=True, slots=True)
class _Request:
    """Supervisor to worker: `metrics`, `stop`, `model_check`, or `reload` with cameras."""

    kind: str
    cameras: tuple[CameraConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class _Answer:
    """Worker to supervisor: `started`, `fatal` (with why), `metrics`, `reloaded`."""

    kind: str
    text: str = ""
    metrics: bytes = b""
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class WorkerError(RuntimeError):
    """A worker could not start (a bad gate model, an edge endpoint it cannot use, ...)."""


def _child(spec: WorkerSpec, conn: Connection) -> None:
    """A worker process: one agent over its cameras, driven by the supervisor's requests."""
    from prometheus_client import generate_latest
    from strata.shared.logs import setup_logging

    from .agent import Agent
    from .filters.gate import GateLoadError
    from .transport.sender import SenderError

    setup_logging(spec.logging.level, spec.logging.json_lines, f"strata-device[{spec.index}]")
    # The terminal's Ctrl-C reaches the whole process group: the supervisor stops workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        agent = Agent(spec.config, spec.models_repository, clip_owner=spec.owns_clips_of)
        agent.sender.start()
    except (GateLoadError, ValueError, SenderError) as exc:
        conn.send(_Answer("fatal", text=str(exc)))
        return
    agent.start()
    conn.send(_Answer("started"))
    while not stop.is_set():
        if conn.poll(0.1):
            try:
                req: _Request = conn.recv()
            except EOFError:  # the supervisor is gone: stop as SIGTERM would
                break
            if req.kind == "stop":
                break
            if req.kind == "metrics":
                conn.send(_Answer("metrics", metrics=generate_latest(agent.metrics.registry)))
            elif req.kind == "model_check":
                agent.request_model_check()
            elif req.kind == "reload":
                try:
                    added, removed = agent.reload(req.cameras)
                except ValueError as exc:
                    conn.send(_Answer("fatal", text=str(exc)))
                else:
                    conn.send(_Answer("reloaded", added=tuple(added), removed=tuple(removed)))
        elif agent.cameras_done() and not agent.draining():
            break
    agent.stop()
    report = WorkerReport(
        spec.index,
        tuple(agent.statuses()),
        {c.camera_id: c.m.worst_lag_s for c in agent.cameras},
        generate_latest(agent.metrics.registry),
    )
    try:
        conn.send(report)
    except (BrokenPipeError, OSError):
        pass


@dataclass
class _Worker:
    """The supervisor's side of one worker process."""

    index: int
    cameras: dict[str, CameraConfig]
    process: Any = None
    conn: Connection | None = None
    report: WorkerReport | None = None
    metrics: bytes = b""
    parsed: tuple[bytes, list[Metric]] = (b"", [])
    restarts: int = 0
    restart_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ended(self) -> bool:
        """Ended with its report (its cameras done, or stopped)."""
        return self.report is not None

    def take(self, msg: Any) -> _Answer | None:
        """Keep a report; return an answer."""
        if isinstance(msg, WorkerReport):
            self.report, self.metrics = msg, msg.metrics
            return None
        return msg if isinstance(msg, _Answer) else None

    def ask(self, req: _Request, want: str, timeout: float = _ANSWER_S) -> _Answer | None:
        """Send `req` and wait for the answer of kind `want`; None when the worker ended,
        died or did not answer in time."""
        with self.lock:
            if self.conn is None or self.report is not None:
                return None
            try:
                self.conn.send(req)
                deadline = time.monotonic() + timeout
                while self.report is None and self.conn.poll(max(0.0, deadline - time.monotonic())):
                    ans = self.take(self.conn.recv())
                    if ans is not None and ans.kind in (want, "fatal"):
                        return ans
            except (EOFError, BrokenPipeError, OSError):
                return None
            return None

    def collect(self) -> None:
        """Take what the worker sent on its own (its report when its cameras end)."""
        with self.lock:
            try:
                while self.conn is not None and self.report is None and self.conn.poll(0):
                    self.take(self.conn.recv())
            except (EOFError, OSError):
                pass


class _MergedMetrics:
    """The workers' metrics as one exposition: samples without a camera label (the sender's,
    the gate's) get a `worker` label so no two collide."""

    def __init__(self, workers: list[_Worker]) -> None:
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for w in list(self.workers):
            ans = w.ask(_Request("metrics"), "metrics", timeout=2.0)
            if ans is not None and ans.kind == "metrics":
                w.metrics = ans.metrics
            if w.parsed[0] is not w.metrics:  # parsed once per text: the CLI reads it per camera
                w.parsed = (w.metrics, list(text_string_to_metric_families(w.metrics.decode())))
            for fam in w.parsed[1]:
                out = merged.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type))
                for s in fam.samples:
                    labels = (
                        s.labels if "camera" in s.labels else {**s.labels, "worker": str(w.index)}
                    )
                    out.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
        yield from merged.values()


class AgentWorkers:
    """The device agent as several worker processes, with `Agent`'s run-time interface:
    start, stop, cameras_done, draining, reload, request_model_check, statuses."""

    def __init__(
        self,
        cfg: DeviceConfig,
        models_repository: str = "",
        logging_cfg: LoggingConfig | None = None,
        workers: int | None = None,
    ) -> None:
        from .agent import camera_ids

        self.cfg = cfg
        self.models_repository = models_repository
        self.logging = logging_cfg or LoggingConfig()
        ids = camera_ids(cfg.cameras)
        by_id = dict(zip(ids, cfg.cameras, strict=True))
        n = workers or worker_count(cfg)
        self.workers = [
            _Worker(i, {c: by_id[c].model_copy(update={"id": c}) for c in group})
            for i, group in enumerate(spread(ids, n))
        ]
        self.registry = CollectorRegistry()
        self.registry.register(_MergedMetrics(self.workers))
        self.restarts = Counter(
            "strata_device_worker_restarts",
            "Worker processes started again after dying without their report",
            ["worker"],
            registry=self.registry,
        )
        self.alive = Gauge(
            "strata_device_workers", "Worker processes running", registry=self.registry
        )
        self._ctx = mp.get_context("spawn")
        self._stopping = False

    def _spec(self, w: _Worker) -> WorkerSpec:
        upload = self.cfg.clips.upload
        # The clips folder's bound is shared: each worker keeps its part of it.
        share = upload.spool_max_mib / len(self.workers)
        cfg = self.cfg.model_copy(
            update={
                "cameras": list(w.cameras.values()),
                # Only the supervisor serves /metrics (the workers' merged).
                "metrics": self.cfg.metrics.model_copy(update={"port": 0}),
                "clips": self.cfg.clips.model_copy(
                    update={"upload": upload.model_copy(update={"spool_max_mib": share})}
                ),
            }
        )
        # Bursts are slotted in each worker's agent: the host's slots are dealt out.
        bursts = burst_share(self.cfg.cascade.concurrent_bursts, len(self.workers), w.index)
        cfg = cfg.model_copy(
            update={"cascade": cfg.cascade.model_copy(update={"concurrent_bursts": bursts})}
        )
        others = frozenset(c for o in self.workers if o is not w for c in o.cameras)
        return WorkerSpec(w.index, cfg, self.models_repository, self.logging, others)

    def _launch(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe()
        w.process = self._ctx.Process(
            target=_child, args=(self._spec(w), child), name=f"device-worker-{w.index}"
        )
        w.process.start()
        child.close()
        w.conn, w.report = parent, None

    def _started(self, w: _Worker) -> None:
        """Wait for the worker's `started`; WorkerError with its reason when it cannot."""
        assert w.conn is not None
        if not w.conn.poll(_START_S):
            raise WorkerError(f"worker {w.index} did not start in {_START_S:.0f}s")
        try:
            ans = w.take(w.conn.recv())
        except EOFError:
            ans = None
        if ans is None or ans.kind != "started":
            raise WorkerError(ans.text if ans is not None else f"worker {w.index} died starting")

    def start(self) -> None:
        """Start every worker and wait until each runs; WorkerError (the others stopped)
        when one cannot start."""
        for w in self.workers:
            self._launch(w)
        try:
            for w in self.workers:
                self._started(w)
        except WorkerError:
            self.stop()
            raise
        self.alive.set(len(self.workers))
        log.info(
            "%d worker process(es): %s",
            len(self.workers),
            "; ".join(f"{w.index}: {', '.join(w.cameras)}" for w in self.workers),
        )

    def watch(self) -> None:
        """Take workers' reports; start again, after a backoff, one that died without."""
        now = time.monotonic()
        for w in self.workers:
            w.collect()
            if w.ended or self._stopping or w.process is None or w.process.is_alive():
                continue
            if w.restart_at == 0.0:
                delay = min(_BACKOFF_S[0] * 2**w.restarts, _BACKOFF_S[1])
                w.restart_at = now + delay
                log.error(
                    "worker %d (cameras %s) died (exit %s) without its report; starting it "
                    "again in %.0fs",
                    w.index,
                    ", ".join(w.cameras),
                    w.process.exitcode,
                    delay,
                )
            elif now >= w.restart_at:
                w.restarts += 1
                w.restart_at = 0.0
                self.restarts.labels(str(w.index)).inc()
                self._launch(w)
        self.alive.set(sum(w.process is not None and w.process.is_alive() for w in self.workers))

    def cameras_done(self) -> bool:
        """Every worker ended with its report (finite sources at their end)."""
        self.watch()
        return all(w.ended for w in self.workers)

    def draining(self) -> list[str]:
        """Removed cameras are drained inside their worker, which ends only after: none here."""
        return []

    def reload(self, cameras: Sequence[CameraConfig]) -> tuple[list[str], list[str]]:
        """Run exactly these cameras: a running camera stays in its worker, a new one goes to
        the worker with the fewest. Returns (added, removed) ids; ValueError for ids that are
        not unique."""
        from .agent import camera_ids

        ids = camera_ids(cameras)
        wanted = {i: c.model_copy(update={"id": i}) for i, c in zip(ids, cameras, strict=True)}
        home = {c: w for w in self.workers for c in w.cameras}
        for w in self.workers:
            w.cameras = {c: wanted[c] for c in w.cameras if c in wanted}
        for c in ids:
            if c not in home:
                min(self.workers, key=lambda w: len(w.cameras)).cameras[c] = wanted[c]
        added: list[str] = []
        removed = [c for c in home if c not in wanted]
        for w in self.workers:
            if w.ended or w.conn is None:
                if w.cameras:  # a worker whose cameras had ended gets new ones
                    self._launch(w)
                    self._started(w)
                    added += [c for c in w.cameras if c not in home]
                continue
            ans = w.ask(_Request("reload", tuple(w.cameras.values())), "reloaded")
            if ans is not None and ans.kind == "fatal":
                raise ValueError(ans.text)
            if ans is not None:
                added += ans.added
        return added, removed

    def request_model_check(self) -> None:
        """Each worker looks for a newer gate model version."""
        for w in self.workers:
            with w.lock:
                if w.conn is not None and w.report is None:
                    try:
                        w.conn.send(_Request("model_check"))
                    except OSError:
                        pass

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop every worker (each settles its frames in flight) and wait for their reports."""
        self._stopping = True
        for w in self.workers:
            if w.process is not None and w.report is None:
                w.ask(_Request("stop"), "report", timeout=timeout_s)
        for w in self.workers:
            if w.process is not None:
                w.process.join(5.0)
                if w.process.is_alive():
                    log.error("worker %d did not end; killing it", w.index)
                    w.process.kill()
                    w.process.join(5.0)
        self.alive.set(0)

    def statuses(self) -> list[CameraStatus]:
        """Every camera's state as its worker reported at its end (FAILED when it has not
        reported: it died)."""
        out: list[CameraStatus] = []
        for w in self.workers:
            if w.report is not None:
                out += w.report.statuses
            else:
                out += [
                    CameraStatus(c, cam.source, CameraState.FAILED, "worker died", 0, 0)
                    for c, cam in w.cameras.items()
                ]
        return out

    def worst_lag_s(self) -> float:
        """The worst lag any camera reported at its worker's end."""
        return max(
            (lag for w in self.workers if w.report for lag in w.report.worst_lag_s.values()),
            default=0.0,
        )
