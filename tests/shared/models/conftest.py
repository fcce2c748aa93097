"""A throwaway repository holding one tiny real classifier."""

from __future__ import annotations

from pathlib import Path

import pytest
from models_testkit import classifier_manifest, tiny_classifier
from strata.shared.models import save_manifest


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A repository with one valid tiny classifier named `tiny`."""
    folder = tmp_path / "repo" / "tiny"
    folder.mkdir(parents=True)
    tiny_classifier(folder / "model.onnx")
    save_manifest(classifier_manifest("tiny", folder / "model.onnx"), folder)
    return tmp_path / "repo"
