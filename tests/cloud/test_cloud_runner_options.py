"""The cloud sizes a GPU runner for its batcher's largest batch (not the runner's default 8)."""

from __future__ import annotations

from strata.cloud.classifier import runner_options
from strata.shared.config.cloud import CloudModelConfig


def test_a_gpu_backend_gets_the_batchers_max_batch() -> None:
    cfg = CloudModelConfig(backend="onnxruntime-cuda", input_size=224)
    opts = runner_options(cfg, 64)
    assert opts["max_batch"] == 64 and opts["input_size"] == 224


def test_the_cpu_backend_gets_only_its_own_options() -> None:
    opts = runner_options(CloudModelConfig(threads=2), 64)
    assert opts == {"threads": 2, "spin": False}
