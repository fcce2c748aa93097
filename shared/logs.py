"""Logging through a queue: hot paths enqueue a record, one thread does the I/O."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import queue
import sys

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


def setup_logging(level: str = "INFO", json_lines: bool = False, name: str = "strata") -> None:
    """Route all logging through a bounded-free queue to stderr; idempotent."""
    global _listener
    if _listener is not None:
        _listener.stop()
    stream = logging.StreamHandler(sys.stderr)
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
