"""Fixtures every tier's tests share: clips, free ports, the real test data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
from gpu_testkit import gpu_requested
from models_testkit import classifier_manifest, tiny_classifier
from required_testkit import missing
from strata.shared.loopback import free_port
from strata.shared.models import save_manifest
from strata.shared.synthetic import SyntheticClip

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def synthetic_clip() -> SyntheticClip:
    return SyntheticClip(width=320, height=240, frames=60, fps=10, objects=3, seed=1)


@pytest.fixture(scope="session")
def synthetic_mp4(tmp_path_factory: pytest.TempPathFactory, synthetic_clip: SyntheticClip) -> Path:
    return synthetic_clip.write(tmp_path_factory.mktemp("clips") / "synthetic.mp4")


@pytest.fixture(scope="session")
def vtest_mp4() -> Path:
    path = DATA / "vtest.mp4"
    if not path.exists():
        missing("data/vtest.mp4 missing: run `python .ci/test_data.py` (needs apt-get)")
    return path


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A model repository with one valid tiny classifier named `tiny`."""
    folder = tmp_path / "repo" / "tiny"
    folder.mkdir(parents=True)
    tiny_classifier(folder / "model.onnx")
    save_manifest(classifier_manifest("tiny", folder / "model.onnx"), folder)
    return tmp_path / "repo"


@pytest.fixture
def gpu_unavailable(request: pytest.FixtureRequest) -> Callable[[str], NoReturn]:
    """Skip, or fail when the run asked for the gpu tests: a GPU run where a back end cannot
    load is a failure, never a quiet skip."""

    def unavailable(reason: str) -> NoReturn:
        if gpu_requested(request.config):
            pytest.fail(f"gpu run, but: {reason}")
        pytest.skip(reason)

    return unavailable
