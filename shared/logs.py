"""Logging through a queue: hot paths enqueue a record, one thread does the I/O."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import queue
import sys
import time

_listener: logging.handlers.QueueListener | None = None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": record.created,
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to sys.stderr as it is when a record is written, not as it was at setup.

    A handler that kept the stream of its setup time writes into a closed file once a
    caller (a test's capture, an embedding program) has swapped sys.stderr and closed it.
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # only the listener thread emits: no race
        super().emit(record)


def setup_logging(level: str = "INFO", json_lines: bool = False, name: str = "strata") -> None:
    """Route all logging through a bounded-free queue to stderr; idempotent."""
    global _listener
    if _listener is not None:
        _listener.stop()
    stream = _StderrHandler(sys.stderr)
    stream.setFormatter(
        _JsonFormatter()
        if json_lines
        else logging.Formatter(f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")
    )
    # Unbounded on purpose: a bounded queue would either block or drop log lines.
    q: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(q)]
    root.setLevel(level)
    _listener = logging.handlers.QueueListener(q, stream, respect_handler_level=False)
    _listener.start()
    atexit.register(_stop)


def _stop() -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


class RateLimitedLog:
    """A log line (a warning by default) per key at most once per `period` seconds,
    saying how many were folded into it.

    For drops and rejections a peer can cause at line rate: each is counted in a metric,
    and the log says what happened without one line per message.
    """

    def __init__(
        self, logger: logging.Logger, period: float = 1.0, level: int = logging.WARNING
    ) -> None:
        self.logger = logger
        self.period = period
        self.level = level
        self._last: dict[str, float] = {}
        self._folded: dict[str, int] = {}

    def warn(self, key: str, fmt: str, *args: object) -> bool:
        """Log unless `key` logged within the period; True when a line was written."""
        now = time.monotonic()
        if now - self._last.get(key, -1e18) < self.period:
            self._folded[key] = self._folded.get(key, 0) + 1
            return False
        folded = self._folded.pop(key, 0)
        if folded:
            fmt += f" (+{folded} more like it since the last line)"
        self.logger.log(self.level, fmt, *args)
        self._last[key] = now
        if len(self._last) > 1024:  # keys are reasons; bound them anyway
            self._last.clear()
        return True
