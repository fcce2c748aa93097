"""Fixtures of the edge tests: the colour detector model and a ZeroMQ context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from edge_colour_model import build_colour_detector
from edge_testkit import MODEL_SIZE


@pytest.fixture(scope="session")
def colour_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_colour_detector(tmp_path_factory.mktemp("models") / "colour.onnx", MODEL_SIZE)


@pytest.fixture
def zctx() -> Iterator[Any]:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)
