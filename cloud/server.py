"""`CloudServer`: the gRPC server with the Analytics, health and reflection services."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc
from strata.shared.metrics import serve_metrics

from .batcher import DynamicBatcher
from .classifier import load_classifier
from .drops import Drops
from .metrics import CloudMetrics
from .security import (
    SecurityError,
    TokenInterceptor,
    check_bind,
    load_token,
    server_credentials,
    split_listen,
)
from .service import AnalyticsService
from .store import open_store
from .watch import WatchHub

log = logging.getLogger(__name__)

SERVICE_NAME: str = analytics_pb2.DESCRIPTOR.services_by_name["Analytics"].full_name


class CloudServer:
    """Everything `strata cloud` runs; start() binds, stop() drains and closes."""

    def __init__(
        self, cfg: CloudConfig, metrics: CloudMetrics | None = None, repository: str = ""
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics or CloudMetrics()
        creds = server_credentials(cfg.tls)
        self.tls = creds is not None
        check_bind(cfg.listen, self.tls, cfg.allow_insecure)
        token = load_token(cfg.auth)
        self.drops = Drops(self.metrics)
        self.classifier = load_classifier(cfg.model, repository)
        self.hub = WatchHub(self.metrics, cfg.max_watchers, cfg.watch_queue)
        try:
            self.store = open_store(cfg.store, self.metrics, self.hub)
        except Exception:
            self.classifier.close()
            raise
        self.batcher = DynamicBatcher(self.classifier, cfg.batcher, self.metrics)
        interceptors = []
        if token is not None:
            interceptors.append(
                TokenInterceptor(token, cfg.auth.health_without_token, self._unauthenticated)
            )
        elif not self.tls:
            log.warning("no TLS and no token: anyone who can reach %s can call it", cfg.listen)
        size = cfg.limits.max_message_bytes
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="grpc"),
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                # Another process on the same port is an error, not a silent share.
                ("grpc.so_reuseport", 0),
            ],
        )
        self.service = AnalyticsService(
            cfg, self.classifier, self.batcher, self.store, self.hub, self.metrics, self.drops
        )
        analytics_pb2_grpc.add_AnalyticsServicer_to_server(  # type: ignore[no-untyped-call]
            self.service, self._server
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )
        host, _ = split_listen(cfg.listen)
        if creds is not None:
            self.port = self._server.add_secure_port(cfg.listen, creds)
        else:
            self.port = self._server.add_insecure_port(cfg.listen)
        if not self.port:
            self.close_parts()
            raise SecurityError(f"cannot bind {cfg.listen} (in use, or not a local address)")
        self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self.metrics_port: int | None = None
        self._stopped = False

    def _unauthenticated(self, method: str, reason: str) -> None:
        self.drops(method.rsplit("/", 1)[-1], "unauthenticated", f"{method}: {reason}")

    def start(self) -> None:
        """Start the writer, the model instances and the server; health says SERVING."""
        self.store.start()
        self.batcher.start()
        self._server.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.metrics_port = serve_metrics(
            self.metrics.registry, self.cfg.metrics.host, self.cfg.metrics.port
        )
        log.info(
            "serving %s on %s (%s%s), model %s, store %s",
            SERVICE_NAME,
            self.address,
            "TLS" if self.tls else "plaintext",
            ", mTLS" if self.cfg.tls.client_ca_file else "",
            self.classifier.name,
            self.store.name,
        )

    def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING, let calls in flight finish for `grace` seconds, then close everything."""
        if self._stopped:
            return
        self._stopped = True
        self.health.enter_graceful_shutdown()
        self.hub.close()
        self._server.stop(self.cfg.grace_s if grace is None else grace).wait()
        self.close_parts()
        log.info("stopped")

    def close_parts(self) -> None:
        """Stop the batcher, commit pending events, release the model."""
        self.batcher.stop()
        self.store.close()
        self.classifier.close()

    def wait(self) -> None:
        """Block until the server stops."""
        self._server.wait_for_termination()
