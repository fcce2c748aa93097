"""`WebhookSink`: one signed JSON POST per event (urllib3), tried `attempts` times with
exponential backoff and jitter (tenacity), then left to the worker's own backoff; a
cooldown per camera, track, rule and type (filters.Cooldown). Every call has a connect and
a read timeout, so a receiver that hangs holds back only this sink's thread."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import urllib3
from strata.shared.config.sinks import WebhookSinkConfig
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from .events import OutboxEvent
from .filters import Cooldown, EventFilter
from .metrics import SinkMetrics
from .payload import event_bytes
from .signature import HEADER, sign
from .sink import DeliveryError

log = logging.getLogger(__name__)

USER_AGENT = "strata-outbox/1"


class WebhookSink:
    """POSTs events to one URL."""

    def __init__(self, cfg: WebhookSinkConfig, metrics: SinkMetrics) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.metrics = metrics
        self._secret = b""
        if cfg.secret_file:
            try:
                self._secret = Path(cfg.secret_file).read_bytes().strip()
            except OSError as exc:
                raise ValueError(
                    f"sink {cfg.name}: cannot read secret_file {cfg.secret_file}: {exc.strerror}"
                ) from None
        self._filter = EventFilter(cfg.filter)
        self._cooldown = Cooldown(cfg.cooldown_s)
        self._stop = threading.Event()
        self._http = urllib3.PoolManager(
            num_pools=2,
            maxsize=1,
            retries=False,
            timeout=urllib3.Timeout(connect=cfg.connect_timeout_s, read=cfg.timeout_s),
            ca_certs=cfg.ca_file or None,
        )
        self._connected = metrics.connected.labels(sink=cfg.name)
        self._retrying = Retrying(
            stop=stop_after_attempt(cfg.attempts),
            wait=wait_exponential_jitter(multiplier=cfg.backoff_s, max=cfg.max_backoff_s),
            retry=retry_if_exception_type(DeliveryError),
            sleep=self._sleep,
            before_sleep=self._count_retry,
            reraise=True,
        )

    def start(self) -> None:
        """Nothing to connect ahead: each POST opens (or reuses) its connection."""
        log.info("sink %s: webhook to %s", self.name, self.cfg.url)

    def close(self) -> None:
        """Stop waiting between tries; close connections."""
        self._stop.set()
        self._http.clear()

    def skip_reason(self, ev: OutboxEvent) -> str | None:
        """Filtered out, in its cooldown, or sent already."""
        if not self._filter(ev):
            return "filtered"
        return self._cooldown.check(ev)

    def deliver(self, ev: OutboxEvent) -> None:
        """POST until a 2xx, `attempts` times at most. Raises DeliveryError."""
        body = event_bytes(ev)
        self._retrying(self._post, ev, body)
        self._cooldown.sent(ev)

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise DeliveryError("stopping", "the sink is stopping")

    def _count_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        reason = exc.reason if isinstance(exc, DeliveryError) else "error"
        self.metrics.failed.labels(sink=self.name, reason=reason).inc()

    def _post(self, ev: OutboxEvent, body: bytes) -> None:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": ev.key,
        }
        if self._secret:
            headers[HEADER] = sign(self._secret, body, int(time.time()))
        try:
            resp = self._http.request("POST", self.cfg.url, body=body, headers=headers)
        except urllib3.exceptions.TimeoutError as exc:
            self._connected.set(0)
            raise DeliveryError("timeout", str(exc)) from None
        except urllib3.exceptions.HTTPError as exc:
            self._connected.set(0)
            raise DeliveryError("unreachable", str(exc)) from None
        self._connected.set(1)
        if not 200 <= resp.status < 300:
            raise DeliveryError(f"http_{resp.status}", f"{self.cfg.url} answered {resp.status}")
