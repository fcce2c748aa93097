from __future__ import annotations

from pathlib import Path

import pytest
from strata.tools.cli import main


def test_list_shows_the_starter_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("mobilenetv3_small", "yolov8n", "mobilenetv2_imagenet"):
        assert name in out
    # The starters are distilled for vtest.avi (shared/starter_models/README.md).
    assert "UNTRAINED" not in out and out.count("trained") >= 3


def test_inspect_verifies_and_loads(tiny_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "inspect", "tiny", "-r", str(tiny_repo)]) == 0
    out = capsys.readouterr().out
    assert "name: tiny" in out
    assert "ok   fp32" in out


def test_inspect_reports_a_corrupt_file(
    tiny_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tiny_repo / "tiny" / "model.onnx").write_bytes(b"not a model")
    assert main(["models", "inspect", "tiny", "-r", str(tiny_repo)]) == 1
    assert "checksum mismatch" in capsys.readouterr().out


def test_inspect_unknown_model(tiny_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "inspect", "nope", "-r", str(tiny_repo)]) == 2
    assert "not found" in capsys.readouterr().err


def test_build_without_repository_is_refused() -> None:
    assert main(["models", "build", "swin"]) == 2
