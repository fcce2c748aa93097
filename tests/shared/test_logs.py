"""Logging through the queue listener."""

from __future__ import annotations

import io
import logging

import pytest
from strata.shared import logs


def test_records_go_to_the_current_stderr_not_a_closed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    logs.setup_logging("INFO", name="t")
    try:
        first.close()  # what a test's capture does between tests
        second = io.StringIO()
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("strata.test").info("after the swap")
        assert logs._listener is not None
        logs._listener.stop()  # flushes the queue
        logs._listener = None
        written = second.getvalue()
        assert "Logging error" not in written
        assert " t INFO strata.test: after the swap" in written
    finally:
        logging.getLogger().handlers[:] = []
        logging.getLogger().setLevel(logging.WARNING)
