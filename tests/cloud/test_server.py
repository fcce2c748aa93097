"""CloudServer's shutdown: a gRPC server that does not stop is bounded, not waited on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cloud_helpers import make_config
from strata.cloud import server as server_module
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig


def test_a_grpc_stop_that_hangs_is_bounded_and_logged(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    model, labels = colour_model
    server = start_server(make_config(model, tmp_path / "e.sqlite", labels))
    grpc_server = server._server

    async def hangs(grace: float | None) -> None:
        # As grpc.aio's stop does on a stream its client cancelled (grpc#28999).
        await asyncio.sleep(3600)

    grpc_server.stop = hangs  # type: ignore[method-assign]
    t = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="strata.cloud.server"):
        server.stop(0.2)
    took = time.monotonic() - t
    assert took < 0.2 + server_module._STOP_BOUND_S + 3, took
    assert "did not stop" in caplog.text
