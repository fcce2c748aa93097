"""The cloud sizes a GPU runner for its batcher's largest batch (not the runner's default 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.cloud.classify.classifier import load_classifier, runner_options
from strata.shared.config.cloud import CloudModelConfig


def test_a_gpu_backend_gets_the_batchers_max_batch() -> None:
    cfg = CloudModelConfig(backend="onnxruntime-cuda", input_size=224)
    opts = runner_options(cfg, 64)
    assert opts["max_batch"] == 64 and opts["input_size"] == 224


def test_the_cpu_backend_gets_only_its_own_options() -> None:
    opts = runner_options(CloudModelConfig(threads=2), 64)
    assert opts == {"threads": 2, "spin": False, "dynamic_block_base": 0}


def _block_base_of(cfg: CloudModelConfig) -> str | None:
    """The session.dynamic_block_base entry of the ORT session the cloud loads for cfg."""
    clf = load_classifier(cfg)
    session = clf.runner.session  # type: ignore[attr-defined]
    try:
        value: str = session.get_session_options().get_session_config_entry(
            "session.dynamic_block_base"
        )
    except RuntimeError:  # ORT: "does not have configuration with key"
        return None
    finally:
        clf.runner.close()
    return value


@pytest.mark.parametrize("base", [0, 4])
def test_dynamic_block_base_reaches_the_ort_session(
    colour_model: tuple[Path, Path], base: int
) -> None:
    model, labels = colour_model
    cfg = CloudModelConfig(path=str(model), labels_file=str(labels), dynamic_block_base=base)
    assert _block_base_of(cfg) == (str(base) if base else None)
