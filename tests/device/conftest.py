"""Helpers for the device tests: a small real ONNX classifier, fast configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from strata.shared.config.device import CascadeConfig, DeviceConfig, GateConfig, SourceConfig


def write_red_classifier(path: Path, size: int = 16) -> Path:
    """A real ONNX classifier: class 1 ("red") when the mean red channel beats the others.

    Input images [N, 3, size, size] (RGB, ImageNet-normalised by the gate); output logits
    [N, 2]: GlobalAveragePool -> Flatten -> Gemm.
    """
    w = np.array([[0.0, 8.0], [0.0, -4.0], [0.0, -4.0]], np.float32)  # R, G, B -> logits
    b = np.array([0.0, 0.0], np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("Gemm", ["flat", "W", "B"], ["logits"]),
        ],
        "red",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def red_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_red_classifier(tmp_path_factory.mktemp("models") / "red.onnx")


def fast_config(edge: str, model: Path | None, **sections: object) -> DeviceConfig:
    """A DeviceConfig with short timeouts for tests; `sections` override whole sections."""
    gate = (
        GateConfig(model_path=str(model), positive_class_ids=[1], threshold=0.5)
        if model
        else GateConfig(enabled=False)
    )
    base: dict[str, object] = {
        "edge": edge,
        "agent_id": "test-agent",
        "source": SourceConfig(
            open_timeout_s=2.0, read_timeout_s=2.0, backoff_initial_s=0.2, backoff_max_s=1.0
        ),
        "gate": gate,
        # These tests count frames through the sender: no header-only messages of dropped
        # frames and no calibration bursts in between (tests/device/test_cascade*.py do).
        "cascade": CascadeConfig(enabled=False),
    }
    base.update(sections)
    return DeviceConfig(**base)  # type: ignore[arg-type]
