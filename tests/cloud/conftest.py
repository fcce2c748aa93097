"""Fixtures of the cloud tests: real ONNX classifiers, real servers on 127.0.0.1, real SQLite,
and a real PostgreSQL server the tests start themselves (skipped, saying how to get one, when
its binaries are not installed)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from cloud_helpers import make_config
from cloud_models import LABELS, build_colour_classifier
from required_testkit import missing
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.tools.postgres_temp import PostgresUnavailableError, TempPostgres

if TYPE_CHECKING:
    from console_helpers import Running

SLOW_SIZE, SLOW_LAYERS = 128, 14


@pytest.fixture(scope="session")
def colour_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model, labels) of the fast colour classifier."""
    d = tmp_path_factory.mktemp("models")
    labels = d / "labels.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    return build_colour_classifier(d / "colour.onnx", size=32), labels


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """(model, seconds per batch of one) of a colour classifier with heavy extra work."""
    import onnxruntime as ort

    d = tmp_path_factory.mktemp("slow")
    path = build_colour_classifier(
        d / "slow.onnx", size=SLOW_SIZE, slow_layers=SLOW_LAYERS, width=64
    )
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.zeros((1, 3, SLOW_SIZE, SLOW_SIZE), np.float32)
    sess.run(None, {"input": x})
    t0 = time.perf_counter()
    sess.run(None, {"input": x})
    return path, time.perf_counter() - t0


@pytest.fixture
def start_server() -> Iterator[Callable[[CloudConfig], CloudServer]]:
    """Start CloudServers; every one still running is stopped at the end."""
    running: list[CloudServer] = []

    def start(cfg: CloudConfig) -> CloudServer:
        server = CloudServer(cfg)
        server.start()
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop(0.5)  # a no-op for one the test stopped itself


@pytest.fixture
def colour_server(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> CloudServer:
    model, labels = colour_model
    return start_server(make_config(model, tmp_path / "events.sqlite", labels))


@pytest.fixture(scope="session")
def postgres() -> Iterator[TempPostgres]:
    """One PostgreSQL server for the session (initdb in a temporary directory)."""
    server = TempPostgres()
    try:
        server.start()
    except PostgresUnavailableError as exc:
        # CI installs PostgreSQL (.ci/system-deps): there a missing server fails, so a green
        # run never hides tests that did not run.
        missing(str(exc))
    yield server
    server.stop()


_databases = itertools.count()


@pytest.fixture
def pg_url(postgres: TempPostgres) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return postgres.create_database(f"t{next(_databases)}")


@pytest.fixture(params=["sqlite", "postgres"])
def console(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Running]:
    """The console over a SQLite file, then over a fresh PostgreSQL database."""
    from console_helpers import cloud_config, start_console

    db: Path | str = tmp_path / "events.sqlite"
    if request.param == "postgres":
        db = request.getfixturevalue("pg_url")
    run = start_console(cloud_config(db))
    yield run
    run.stop()
