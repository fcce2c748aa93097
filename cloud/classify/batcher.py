"""The dynamic batcher: one bounded queue, batches of up to max_batch formed within max delay.

Like Triton's dynamic batcher, the oldest queued request waits at most max_queue_delay for
others to join it. With `adaptive_close` a lone caller does not wait: when no two requests
were in the batcher at once in the last one to two seconds, nothing else is coming that the
delay could add, so the batch of one goes at once (one client in a closed loop no longer pays
max_queue_delay on every call). As soon as requests overlap, the delay applies as before. (A
close at the recent peak of requests in flight was tried: under load it formed smaller batches
at 2-4 clients than the plain delay.)

A full queue refuses at once (the caller answers RESOURCE_EXHAUSTED with a retry hint) instead
of letting latency grow without bound; a request whose deadline has passed or whose caller
went away is dropped before it is computed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from strata.shared.config.cloud import CloudBatcherConfig

from ..gather import gather
from ..metrics import CloudMetrics
from .classifier import BatchBuffer, Classifier

if TYPE_CHECKING:
    from strata.shared.models.switcher import LoadedVersion

    from .versions import ClassifierSwitcher

log = logging.getLogger(__name__)


class QueueFullError(RuntimeError):
    """The batcher queue is full; try again after retry_after_ms."""

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__(f"server busy: inference queue is full; retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


class DeadlineExpiredError(RuntimeError):
    """The request's deadline passed while it was queued; it was not computed."""


class BatcherClosedError(RuntimeError):
    """The server is shutting down."""


@dataclass(frozen=True, slots=True)
class Scored:
    """One request's probability row and the classifier (version) that computed it."""

    probs: np.ndarray
    classifier: Classifier


@dataclass(slots=True)
class _Item:
    image: np.ndarray
    deadline: float | None  # time.monotonic() seconds
    enqueued: float
    future: Future[Scored]
    camera: str = ""


def _model_limit(classifier: Classifier, cfg: CloudBatcherConfig) -> int:
    return min(cfg.max_batch, classifier.fixed_batch) if classifier.fixed_batch else cfg.max_batch


def batch_limit(classifier: Classifier, cfg: CloudBatcherConfig) -> int:
    """The largest batch the batcher forms: cfg.max_batch, capped by a fixed batch axis of
    the model and by a GPU runner's buffers (they hold at most the runner's max batch)."""
    limit = _model_limit(classifier, cfg)
    runner_max = getattr(classifier.runner, "max_batch", None)
    if isinstance(runner_max, int) and runner_max < limit:
        return runner_max
    return limit


class DynamicBatcher:
    """Queue of model-sized images in, probability rows out (through futures).

    With a `switcher` the classifier can change at run time: each batch runs on the
    classifier current when it starts, and a new version replaces it between two batches;
    the old one is closed when its last batch is done (cloud/classify/versions.py)."""

    def __init__(
        self,
        classifier: Classifier,
        cfg: CloudBatcherConfig,
        metrics: CloudMetrics,
        switcher: ClassifierSwitcher | None = None,
    ) -> None:
        self.classifier = classifier
        self.cfg = cfg
        self.metrics = metrics
        self.max_batch = batch_limit(classifier, cfg)
        model_max = _model_limit(classifier, cfg)
        if self.max_batch < model_max:
            log.warning(
                "the model runner takes at most %d per batch: max_batch %d -> %d",
                self.max_batch,
                model_max,
                self.max_batch,
            )
        self._delay = cfg.max_queue_delay_ms / 1000.0
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=cfg.max_queue_size)
        # Requests submitted and not yet answered, and its peak in this and the last second.
        self._count_lock = threading.Lock()
        self._in_flight = 0
        self._second = 0
        self._peak_now = 0
        self._peak_before = 0
        self._stop = threading.Event()
        self.switcher = switcher
        self._clf_lock = threading.Lock()
        self._uses: dict[int, int] = {}  # id(classifier) -> batches running on it
        self._threads = [
            threading.Thread(
                target=self._work,
                args=(classifier.new_buffer(self.max_batch),),
                name=f"batcher-{i}",
                daemon=True,
            )
            for i in range(cfg.instances)
        ]

    def start(self) -> None:
        """Start the model instances."""
        for t in self._threads:
            t.start()

    def submit(
        self, image: np.ndarray, deadline: float | None = None, camera: str = ""
    ) -> Future[Scored]:
        """Queue one model-sized BGR image; raises QueueFullError or BatcherClosedError.

        `camera` (crops from edges) is charged its share of the batch's compute time."""
        if self._stop.is_set():
            raise BatcherClosedError("server is shutting down")
        fut: Future[Scored] = Future()
        now = time.monotonic()
        try:
            self._queue.put_nowait(_Item(image, deadline, now, fut, camera))
        except queue.Full:
            raise QueueFullError(self.cfg.retry_after_ms) from None
        self._count_in(now)
        fut.add_done_callback(self._count_out)
        self.metrics.queue_depth.set(self._queue.qsize())
        return fut

    def _count_in(self, now: float) -> None:
        second = int(now)
        with self._count_lock:
            self._in_flight += 1
            if second != self._second:
                self._peak_before = self._peak_now if second == self._second + 1 else 0
                self._peak_now = 0
                self._second = second
            self._peak_now = max(self._peak_now, self._in_flight)

    def _count_out(self, _fut: Future[Scored]) -> None:
        with self._count_lock:
            self._in_flight -= 1

    def _worth_waiting_for(self) -> int:
        """How many requests a batch waits for: 1 for a lone caller, else max_batch."""
        if not self.cfg.adaptive_close:
            return self.max_batch
        with self._count_lock:
            alone = max(self._peak_now, self._peak_before) <= 1
        return 1 if alone else self.max_batch

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the batch in progress, fail what is still queued, join the workers."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(BatcherClosedError("server is shutting down"))

    def _collect(self) -> list[_Item]:
        try:
            first = self._queue.get(timeout=0.1)
        except queue.Empty:
            return []
        return gather(
            self._queue,
            first,
            self.max_batch,
            first.enqueued + self._delay,
            wait_for=self._worth_waiting_for(),
        )

    def _work(self, buffer: BatchBuffer) -> None:
        owner = self.classifier  # the classifier `buffer` was made for
        while not self._stop.is_set():
            if self.switcher is not None:
                self._maybe_switch(self.switcher)
            items = self._collect()
            if not items:
                continue
            self.metrics.queue_depth.set(self._queue.qsize())
            live = self._admit(items)
            if not live:
                continue
            clf = self._acquire()
            try:
                if clf is not owner:  # once per switch: the new version's normalization
                    buffer, owner = clf.new_buffer(self.max_batch), clf
                self._run(clf, buffer, live)
            finally:
                self._release(clf)

    def _maybe_switch(self, switcher: ClassifierSwitcher) -> None:
        switcher.poll()
        loaded = switcher.ready()
        if loaded is not None:
            self._switch_to(switcher, loaded)

    def _switch_to(self, switcher: ClassifierSwitcher, loaded: LoadedVersion[Classifier]) -> None:
        """Serve `loaded` from the next batch on; batches running finish on the old one."""
        with self._clf_lock:
            old, self.classifier = self.classifier, loaded.model
            idle = self._uses.get(id(old), 0) == 0
        switcher.switched(loaded, old.version)
        if idle:
            old.close()

    def _acquire(self) -> Classifier:
        with self._clf_lock:
            clf = self.classifier
            self._uses[id(clf)] = self._uses.get(id(clf), 0) + 1
        return clf

    def _release(self, clf: Classifier) -> None:
        with self._clf_lock:
            left = self._uses.pop(id(clf)) - 1
            if left:
                self._uses[id(clf)] = left
            retired = not left and clf is not self.classifier
        if retired:  # the last batch on a replaced version
            clf.close()

    def _admit(self, items: list[_Item]) -> list[_Item]:
        now = time.monotonic()
        live: list[_Item] = []
        for item in items:
            if not item.future.set_running_or_notify_cancel():
                self.metrics.expired_skipped.inc()  # the caller gave up (cancelled, timed out)
                continue
            if item.deadline is not None and now >= item.deadline:
                self.metrics.expired_skipped.inc()
                item.future.set_exception(
                    DeadlineExpiredError(
                        f"deadline passed after {1000 * (now - item.enqueued):.0f} ms in queue; "
                        "not computed"
                    )
                )
                continue
            self.metrics.queue_duration.observe(now - item.enqueued)
            live.append(item)
        return live

    def _run(self, clf: Classifier, buffer: BatchBuffer, live: list[_Item]) -> None:
        n = len(live)
        images = [item.image for item in live]
        try:
            t0 = time.perf_counter()
            buffer.fill(images)
            t1 = time.perf_counter()
            probs = clf.run(buffer, n)
            t2 = time.perf_counter()
        except Exception as exc:  # a model failure fails this batch, not the server
            log.exception("model %s failed on a batch of %d", clf.name, n)
            for item in live:
                item.future.set_exception(exc)
            return
        m = self.metrics
        m.compute_input_duration.observe(t1 - t0)
        m.compute_duration.observe(t2 - t1)
        m.batch_size.observe(n)
        m.inference_count.inc(n)
        m.exec_count.inc()
        share = (t2 - t0) / n
        for item in live:
            if item.camera:
                m.camera_gpu_seconds.labels(item.camera).inc(share)
        if self.switcher is not None:
            self.switcher.remember(images, clf, probs)
        for i, item in enumerate(live):
            item.future.set_result(Scored(probs[i], clf))
