"""Fixtures of the tools tests: the edge's colour detector and the cloud's colour classifier,
built by the same model builders the tier tests use (their folders join the import path as
pytest puts them there when it collects those tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
for _tier in ("edge", "cloud"):
    if str(TESTS / _tier) not in sys.path:
        sys.path.append(str(TESTS / _tier))

from cloud_models import build_colour_classifier  # noqa: E402
from edge_colour_model import build_colour_detector  # noqa: E402
from edge_testkit import MODEL_SIZE  # noqa: E402


@pytest.fixture(scope="session")
def colour_detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The edge tests' colour detector (one box per synthetic-clip colour)."""
    return build_colour_detector(tmp_path_factory.mktemp("models") / "colour.onnx", MODEL_SIZE)


@pytest.fixture(scope="session")
def colour_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cloud tests' fast colour classifier."""
    return build_colour_classifier(tmp_path_factory.mktemp("models") / "classifier.onnx", size=32)
