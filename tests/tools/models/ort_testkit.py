"""ONNX Runtime on the CPU, for the graph rewrite tests (focus, hard_swish, shuffle,
split_convs): each runs a graph before and after its rewrite and compares the outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort


def run_cpu(model: onnx.ModelProto | str, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Every output of `model` (a built ModelProto, or the path of a file) on `feed`."""
    src = model if isinstance(model, str) else model.SerializeToString()
    s = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in s.run(None, feed)]
