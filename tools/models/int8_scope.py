"""Which layers an INT8 recipe keeps in float, found from the FP32 model's own activations.

OpenVINO (and ONNX Runtime's QDQ on the CPU) quantize activations with one scale per
tensor. A tensor whose channels span very different ranges loses its narrow channels:
PicoDet-S 416's stem output (hard-swish, then max-pool) has channels reaching 568 beside
channels that never leave 0.3-6.4, so one INT8 step of the tensor (2.2) is wider than those
channels' whole swing. A dense convolution mixes every channel and the wide ones carry it;
a depthwise convolution sees each channel alone, so a channel that fits in a step or two
reaches its output as a constant. `narrow_depthwise` finds those convolutions on the
calibration frames (the site's own) and the recipe keeps them in float.

Measured on PicoDet-S 416 (vtest_a calibrating, vtest_b held out, OpenVINO/NNCF): keeping
only the stem's depthwise conv (Conv_1) in float lifts box F1 against FP32 from 0.937 to
0.988; the rule below keeps 7 of the 34 depthwise convs and agrees at 0.985
(docs/models.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# A depthwise conv stays in float when some input channel spans fewer than this many steps
# of the tensor's per-tensor INT8 scale (its whole range / 255).
NARROW_STEPS = 4.0
STAT_FRAMES = 32  # calibration frames the ranges are taken on (min/max over all of them)


@dataclass(frozen=True, slots=True)
class ChannelSpread:
    """One depthwise conv's input: how many INT8 steps its narrowest channel spans."""

    conv: str
    tensor: str
    channels: int
    narrowest_steps: float  # the narrowest channel's range / (tensor range / 255)
    narrow_channels: int  # channels under the recipe's threshold


def depthwise_inputs(model: Any) -> dict[str, str]:
    """Depthwise Conv name -> its input tensor (group == input channels > 1)."""
    import onnx

    shapes = {t.name: t for t in model.graph.initializer}
    out: dict[str, str] = {}
    for node in model.graph.node:
        if node.op_type != "Conv" or not node.name:
            continue
        group = next(
            (onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1
        )
        weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
        # Depthwise: one input channel per group (weight [C_out, 1, kh, kw]).
        if group > 1 and weight is not None and list(weight.dims)[1:2] == [1]:
            out[node.name] = node.input[0]
    return out


def channel_ranges(
    path: Path, tensors: Sequence[str], calibration: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-channel (min, max) of each named tensor over the calibration frames, from the
    FP32 model run by ONNX Runtime with those tensors added as outputs."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    known = {o.name for o in model.graph.output}
    for name in tensors:
        if name not in known:
            model.graph.output.append(
                onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = model.graph.input[0].name
    lo: dict[str, np.ndarray] = {}
    hi: dict[str, np.ndarray] = {}
    for i in range(len(calibration)):
        values = session.run(list(tensors), {feed: calibration[i : i + 1]})
        for name, value in zip(tensors, values, strict=True):
            axes = (0, *range(2, value.ndim))
            mn, mx = value.min(axis=axes), value.max(axis=axes)
            lo[name] = np.minimum(lo[name], mn) if name in lo else mn
            hi[name] = np.maximum(hi[name], mx) if name in hi else mx
    return {name: (lo[name], hi[name]) for name in tensors}


def spreads(
    path: Path, model: Any, calibration: np.ndarray, steps: float = NARROW_STEPS
) -> list[ChannelSpread]:
    """Every depthwise conv's input spread, in graph order (on at most STAT_FRAMES frames
    spread over the calibration batch)."""
    convs = depthwise_inputs(model)
    if not convs:
        return []
    pick = np.linspace(0, len(calibration) - 1, min(STAT_FRAMES, len(calibration))).astype(int)
    tensors = sorted(set(convs.values()))
    ranges = channel_ranges(path, tensors, calibration[np.unique(pick)])
    out = []
    for conv, tensor in convs.items():
        lo, hi = ranges[tensor]
        step = max(float(hi.max() - lo.min()), 1e-12) / 255.0
        levels = (hi - lo) / step
        out.append(
            ChannelSpread(
                conv, tensor, len(levels), round(float(levels.min()), 3),
                int((levels < steps).sum()),
            )
        )  # fmt: skip
    return out


def narrow_depthwise(
    path: Path, model: Any, calibration: np.ndarray, steps: float = NARROW_STEPS
) -> list[str]:
    """Depthwise convs with an input channel narrower than `steps` INT8 steps of its
    tensor: the ones a per-tensor activation scale cannot serve (module docstring)."""
    if steps <= 0:
        return []
    return [s.conv for s in spreads(path, model, calibration, steps) if s.narrow_channels]
