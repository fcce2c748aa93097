"""`cloud.serving_nice` lowers the priority of the serving threads, never the model's."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from cloud_helpers import jpeg, make_config, stub_for
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, common_pb2, current_version


def _nice(tid: int | None) -> int:
    assert tid is not None
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.mark.parametrize("step", [0, 5])
def test_serving_threads_yield_to_the_model(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
    step: int,
) -> None:
    model, labels = colour_model
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    server = start_server(make_config(model, tmp_path / "events.sqlite", labels, serving_nice=step))
    channel, stub = stub_for(server)
    req = analytics_pb2.ClassifyRequest(
        version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=jpeg((0, 0, 255))
    )
    assert stub.Classify(req, timeout=10).labels[0].label == "red"
    channel.close()
    assert _nice(server._thread.native_id) == min(base + step, 19)
    for worker in server.batcher._threads:
        assert _nice(worker.native_id) == base
