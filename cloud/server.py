"""`CloudServer`: the gRPC server with the Analytics, health and reflection services.

The server is grpc.aio on one event loop in its own thread; start/stop/wait keep a plain
blocking interface for the CLI and the tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from strata.shared.config.cloud import CloudConfig
from strata.shared.config.objects import DEFAULT_TRACK
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc
from strata.shared.gpu_telemetry import DcgmCollector, GpuTelemetry, open_nvml
from strata.shared.metrics_web import MetricsServer, serve
from strata.shared.metrics_web import check_bind as check_metrics_bind

from .api.drops import Drops
from .api.parsing import ParseGuard
from .api.service import AnalyticsService
from .api.service_parts import ServiceParts
from .api.watch import WatchHub
from .classify.batcher import DynamicBatcher, batch_limit
from .classify.classifier import load_classifier
from .classify.versions import ClassifierSwitcher, cloud_version_metrics
from .console.security import ConsoleSecurity, console_security
from .identity.service import IdentityLinker, Searcher
from .metrics import CloudMetrics
from .security import (
    SecurityError,
    TokenInterceptor,
    check_bind,
    load_token,
    server_credentials,
    split_listen,
)
from .store.registry import open_store
from .store.retention import Pruner

if TYPE_CHECKING:
    from strata.shared.config.rules import RulesConfig

    from .console.server import ConsoleServer
    from .outbox.runner import Outbox

log = logging.getLogger(__name__)
# How long past its grace the gRPC server may take to stop before the process closes anyway.
_STOP_BOUND_S = 5.0

T = TypeVar("T")

SERVICE_NAME: str = analytics_pb2.DESCRIPTOR.services_by_name["Analytics"].full_name


class CloudServer:
    """Everything `strata cloud` runs; start() binds, stop() drains and closes."""

    def __init__(
        self,
        cfg: CloudConfig,
        metrics: CloudMetrics | None = None,
        repository: str = "",
        rules: RulesConfig | None = None,
        tracked: Sequence[str] = DEFAULT_TRACK,
    ) -> None:
        """`tracked`: the labels the sinks' Home Assistant discovery announces (the
        objects section, cloud/outbox/tracked.py)."""
        self.cfg = cfg
        self.rules = rules  # drawn on the console's detail pages
        self.metrics = metrics or CloudMetrics()
        # The classifier's GPU under DCGM exporter names (absent without NVML).
        self.metrics.registry.register(DcgmCollector(GpuTelemetry(open_nvml())))
        creds = server_credentials(cfg.tls)
        self.tls = creds is not None
        check_bind(cfg.listen, self.tls, cfg.allow_insecure)
        check_metrics_bind(cfg.metrics, "cloud.metrics")
        # The web console (cloud.http): checked now, served from start() on the same loop.
        self.console_security = console_security(cfg)
        self.console: ConsoleServer | None = None
        token = load_token(cfg.auth)
        self.drops = Drops(self.metrics)
        # Delivery to MQTT and webhooks from the store (cloud/outbox); imported only when used.
        self.outbox = self._outbox(tracked)
        self.classifier = load_classifier(cfg.model, repository, cfg.batcher.max_batch)
        self.hub = WatchHub(self.metrics, cfg.max_watchers, cfg.watch_queue)
        try:
            self.store = open_store(cfg.store, self.metrics, self.hub)
        except Exception:
            self.classifier.close()
            raise
        # Retention of tracks, their events and snapshots (cloud.snapshots.retention).
        self.pruner = self._pruner()
        self.linker = self._linker()
        # Search by example: SearchSimilar and the console share it.
        self.searcher = Searcher(self.store, self.metrics, cfg.identity.min_similarity)
        # Run-time version switches of a repository classifier (cloud/classify/versions.py).
        self.switcher: ClassifierSwitcher | None = None
        if not cfg.model.path:
            from strata.shared.models import repository_for

            self.switcher = ClassifierSwitcher(
                repository_for(repository, cfg.model.name, "cloud.model.name"),
                self.classifier,
                cfg.model,
                cfg.versions,
                batch_limit(self.classifier, cfg.batcher),
                cloud_version_metrics(self.metrics.registry),
            )
        self.batcher = DynamicBatcher(self.classifier, cfg.batcher, self.metrics, self.switcher)
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if token is not None:
            interceptors.append(
                TokenInterceptor(token, cfg.auth.health_without_token, self._unauthenticated)
            )
        elif not self.tls:
            log.warning("no TLS and no token: anyone who can reach %s can call it", cfg.listen)
        interceptors.append(ParseGuard(self._bad_request))
        # Blocking work (store reads, large decodes) runs here, never on the event loop.
        self.executor = ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="cloud")
        parts = (self.batcher, self.store, self.hub, self.drops, self.executor, self.searcher)
        self.service = AnalyticsService(cfg, ServiceParts(*parts), self.metrics)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve_loop, name="cloud-grpc", daemon=True)
        self._thread.start()
        self.health = health.aio.HealthServicer()
        try:
            self.port = self._call(self._build(interceptors, creds))
        except Exception:
            self._end_loop()
            self.close_parts()
            raise
        host, _ = split_listen(cfg.listen)
        self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self.metrics_port: int | None = None
        self.metrics_server: MetricsServer | None = None
        self._stopped = False

    def _outbox(self, tracked: Sequence[str]) -> Outbox | None:
        """The sinks (cloud.sinks), None when off; discovery announces `tracked` only."""
        if not self.cfg.sinks.enabled:
            return None
        from .outbox.runner import Outbox

        return Outbox(self.cfg.sinks, self.cfg.store, self.metrics.sinks, tracked)

    def _pruner(self) -> Pruner | None:
        """The background pruner, when some track can expire."""
        retention = self.cfg.snapshots.retention
        return Pruner(self.store, retention, self.metrics) if retention.active else None

    def _linker(self) -> IdentityLinker | None:
        """The background identity linker, unless cloud.identity.link is off."""
        if not self.cfg.identity.link:
            return None
        return IdentityLinker(self.store, self.cfg.identity, self.metrics)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run a coroutine on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _build(
        self,
        interceptors: list[grpc.aio.ServerInterceptor],
        creds: grpc.ServerCredentials | None,
    ) -> int:
        cfg = self.cfg
        size = cfg.limits.max_message_bytes
        self._server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.max_concurrent_streams", cfg.limits.max_streams_per_connection),
                # Another process on the same port is an error, not a silent share.
                ("grpc.so_reuseport", 0),
            ],
        )
        analytics_pb2_grpc.add_AnalyticsServicer_to_server(  # type: ignore[no-untyped-call]
            self.service, self._server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )
        try:
            if creds is not None:
                port = self._server.add_secure_port(cfg.listen, creds)
            else:
                port = self._server.add_insecure_port(cfg.listen)
        except RuntimeError:
            port = 0
        if not port:
            raise SecurityError(f"cannot bind {cfg.listen} (in use, or not a local address)")
        return int(port)

    def _serve_loop(self) -> None:
        """The event loop thread. At `serving_nice` it, and every thread it starts (gRPC's,
        the executor's), yields the CPU to the model's threads (nice 0): on a saturated CPU
        a request's network and decode work then fills the model's pauses instead of
        preempting one of its threads while the others wait for it at the op's end."""
        if self.cfg.serving_nice:
            tid = threading.get_native_id()
            try:  # on Linux PRIO_PROCESS with a thread id sets that thread alone
                nice = os.getpriority(os.PRIO_PROCESS, tid) + self.cfg.serving_nice
                os.setpriority(os.PRIO_PROCESS, tid, min(nice, 19))
            except OSError as exc:
                log.warning("cannot lower the serving threads' priority: %s", exc)
        self._loop.run_forever()

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def _bad_request(self, method: str, reason: str) -> None:
        self.drops(method.rsplit("/", 1)[-1], "bad_request", f"{method}: {reason}")

    def _unauthenticated(self, method: str, reason: str) -> None:
        self.drops(method.rsplit("/", 1)[-1], "unauthenticated", f"{method}: {reason}")

    def start(self) -> None:
        """Start the writer, the model instances and the server; health says SERVING."""
        # First: a /metrics that cannot be served stops the start before anything runs.
        self.metrics_server = serve(self.metrics.registry, self.cfg.metrics, "cloud.metrics")
        self.metrics_port = None if self.metrics_server is None else self.metrics_server.port
        self.store.start()
        if self.pruner is not None:
            self.pruner.start()
        if self.linker is not None:
            self.linker.start()
        if self.outbox is not None:
            self.outbox.start()
        self.batcher.start()
        self._call(self._start())
        if self.console_security is not None:
            self._call(self._start_console(self.console_security))
        log.info(
            "serving %s on %s (%s%s), model %s, store %s",
            SERVICE_NAME,
            self.address,
            "TLS" if self.tls else "plaintext",
            ", mTLS" if self.cfg.tls.client_ca_file else "",
            self.classifier.name,
            self.store.name,
        )

    async def _start(self) -> None:
        await self._server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def _start_console(self, security: ConsoleSecurity) -> None:
        from .console.reads import ConsoleParts
        from .console.server import ConsoleServer

        parts = ConsoleParts(
            self.store,
            self.hub,
            self.executor,
            self.cfg.http,
            self.rules,
            self.metrics.registry,
            self.cfg.clips,
            self.searcher,
        )
        self.console = ConsoleServer(parts, security)
        await self.console.start()

    async def _stop(self, grace: float) -> None:
        await self.health.enter_graceful_shutdown()
        if self.console is not None:
            await self.console.stop()
        self.hub.close()
        try:
            # grpc.aio's stop can hang on a stream its client cancelled (grpc#28999): the
            # grace, then a bound; every acked event is already committed.
            await asyncio.wait_for(self._server.stop(grace), grace + _STOP_BOUND_S)
        except TimeoutError:
            log.warning(
                "the gRPC server did not stop %gs after its grace; closing anyway", _STOP_BOUND_S
            )

    def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING, let calls in flight finish for `grace` seconds, then close everything."""
        if self._stopped:
            return
        self._stopped = True
        g = self.cfg.grace_s if grace is None else grace
        try:
            self._call(self._stop(g), timeout=g + 30)
        finally:
            self._end_loop()
            self.close_parts()
            if self.metrics_server is not None:
                self.metrics_server.stop()
        log.info("stopped")

    def request_model_check(self) -> None:
        """Look for a newer classifier version now (SIGHUP)."""
        if self.switcher is not None:
            self.switcher.request()

    def close_parts(self) -> None:
        """Stop the batcher, commit pending events, release the model."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.switcher is not None:
            self.switcher.stop()
        self.batcher.stop()
        if self.outbox is not None:
            self.outbox.stop()
        if self.pruner is not None:
            self.pruner.stop()
        if self.linker is not None:
            self.linker.stop()
        self.store.close()
        # The classifier serving now (a version switch replaces the first one).
        self.batcher.classifier.close()

    def wait(self) -> None:
        """Block until the server stops."""
        self._thread.join()
