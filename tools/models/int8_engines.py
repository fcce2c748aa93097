"""The two INT8 engines of `strata models quantize --calibration`: OpenVINO (NNCF) and ONNX
Runtime (the QDQ path of tools/models/quantize.py).

Each engine does three things on the same (N, 3, S, S) batches the edge's preprocessing
writes: run the FP32 model (the reference), quantize it with some layers kept at higher
precision, and run the INT8 result. `openvino` and `nncf` come from the `quantize` extra and
are imported only here, only when the OpenVINO engine is asked for.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from strata.tools.models.focus import focus_file
from strata.tools.models.hard_swish import hard_swish_file
from strata.tools.models.int8_scope import NARROW_STEPS, narrow_depthwise
from strata.tools.models.onnx_graph import producers
from strata.tools.models.shuffle import shuffle_file
from strata.tools.models.split_convs import fold_file, piece_names

log = logging.getLogger(__name__)

Engine = Literal["openvino", "onnxruntime"]
ENGINES: tuple[Engine, ...] = ("openvino", "onnxruntime")
INSTALL_HINT = "pip install 'strata[quantize]' (nncf and openvino)"

# Runs one (1, 3, S, S) batch; returns the model's outputs in the manifest's order.
Runner = Callable[[np.ndarray], list[np.ndarray]]


class EngineUnavailableError(RuntimeError):
    """The engine's packages are not installed; the message names the extra."""


@dataclass(frozen=True, slots=True)
class Recipe:
    """One way of quantizing: which learned layers stay at higher precision, and options.

    `head_depth`: the last `head_depth` convolutions before each output (the detection
    head) stay in float, with everything after them (the decode: splits, sigmoids,
    reshapes, DFL). `narrow_steps`: depthwise convolutions with an input channel spanning
    fewer than this many steps of the tensor's INT8 scale stay in float too
    (int8_scope.narrow_depthwise; 0: none). `fast_bias_correction` and `preset` are NNCF's;
    the ONNX Runtime engine uses `method` (its calibrator) instead."""

    name: str
    head_depth: int = 1
    narrow_steps: float = NARROW_STEPS
    fast_bias_correction: bool = True
    preset: Literal["mixed", "performance"] = "mixed"
    method: Literal["entropy", "minmax", "percentile"] = "minmax"


# Tried in order until one reaches the threshold: each keeps more in float than the last.
LADDER: tuple[Recipe, ...] = (
    # PicoDet-S 416, OpenVINO, vtest_a calibrating (128 frames), vtest_b held out (100
    # frames, 903 FP32 boxes at score 0.5): the head output convs + decode in float alone
    # agree at box F1 0.937 (NNCF defaults 0.85; the mixed preset and full bias correction
    # bring it there), the head towers too 0.933. Keeping one part of the network in float
    # at a time found the stem's depthwise conv (Conv_1), whose input has channels narrower
    # than one INT8 step of the tensor: with the narrow depthwise convs in float, 0.985.
    Recipe(
        "narrow-input depthwise convs + head output convs + decode in float, full bias correction",
        head_depth=1,
        fast_bias_correction=False,
        # ONNX Runtime (conv inputs only): percentile 0.920, minmax 0.882 on the same clips.
        method="percentile",
    ),
    Recipe(
        "narrow-input depthwise convs + head towers (last 5 convs per output) + decode in "
        "float, full bias correction",
        head_depth=5,
        fast_bias_correction=False,
        method="entropy",
    ),
)


def require(engine: Engine) -> None:
    """EngineUnavailableError, naming the extra to install, when `engine` cannot be imported."""
    if engine == "openvino":
        try:
            import nncf  # noqa: F401
            import openvino  # noqa: F401
        except ImportError as exc:
            raise EngineUnavailableError(
                f"--engine openvino needs nncf and openvino, which are not installed "
                f"({exc.name} missing): {INSTALL_HINT}; or use --engine onnxruntime"
            ) from None
    elif engine == "onnxruntime":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise EngineUnavailableError(
                "--engine onnxruntime needs onnxruntime: pip install 'strata[cpu]'"
            ) from None
    else:
        raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")


def head_convs(model: Any, depth: int) -> tuple[list[str], list[str]]:
    """(learned Convs within `depth` of an output, the decode nodes after them), by name.

    Walks back from each output; a Conv fed by a Softmax is the DFL integral (fixed
    weights), part of the decode, and does not count."""
    writers = producers(model.graph)
    convs: set[str] = set()
    tail: set[str] = set()
    stack: list[tuple[str, int]] = [(o.name, 0) for o in model.graph.output]
    seen: set[tuple[str, int]] = set()
    while stack:
        tensor, passed = stack.pop()
        node = writers.get(tensor)
        # Keyed by output tensor: some nodes (the imported hard-swish) have no name.
        if node is None or (node.output[0], passed) in seen:
            continue
        seen.add((node.output[0], passed))
        learned = node.op_type == "Conv" and _learned(node, writers)
        if learned:
            if passed >= depth:
                continue
            convs.add(node.name)
            passed += 1
        elif passed == 0:
            tail.add(node.name)
        stack.extend((i, passed) for i in node.input if i)
    return sorted(c for c in convs if c), sorted(t for t in tail if t)


def kept_in_float(
    path: Path, model: Any, recipe: Recipe, calibration: np.ndarray
) -> tuple[str, ...]:
    """Node names a recipe keeps in float: the depthwise convs with narrow input channels
    (measured on the calibration frames), the head's last convs and the decode."""
    narrow = narrow_depthwise(path, model, calibration, recipe.narrow_steps)
    convs, tail = head_convs(model, recipe.head_depth)
    return tuple(dict.fromkeys(narrow + convs + tail))


def _learned(node: Any, writers: dict[str, Any]) -> bool:
    src = writers.get(node.input[0])
    return src is None or src.op_type != "Softmax"


@dataclass(frozen=True, slots=True)
class Quantized:
    """An INT8 model ready to run, and how to save it."""

    run: Runner
    save: Callable[[Path], list[Path]]  # writes the file(s) under this stem; returns them
    kept: tuple[str, ...]  # node names kept at higher precision
    suffix: str  # file extension of the saved model
    note: str = ""  # what the engine changed besides quantizing, for the report


class OpenVinoEngine:
    """OpenVINO: ONNX read by OpenVINO, NNCF post-training quantization of the ov.Model."""

    name: Engine = "openvino"

    def __init__(self, onnx_path: Path, outputs: Sequence[str], threads: int) -> None:
        import openvino as ov

        self._ov = ov
        self._core = ov.Core()
        self._path = onnx_path
        self._outputs = list(outputs)
        self._config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
        if threads > 0:
            self._config["INFERENCE_NUM_THREADS"] = threads

    def fp32(self) -> Runner:
        """The FP32 model compiled for the CPU (precision hint f32: no bf16 shortcut)."""
        return self._runner(self._core.read_model(str(self._path)))

    def _runner(self, model: Any) -> Runner:
        compiled = self._core.compile_model(model, "CPU", self._config)
        request = compiled.create_infer_request()
        ports = [compiled.output(n) for n in self._outputs]

        def run(batch: np.ndarray) -> list[np.ndarray]:
            result = request.infer({0: batch})
            return [np.array(result[p]) for p in ports]

        return run

    def quantize(self, calibration: np.ndarray, recipe: Recipe, onnx_model: Any) -> Quantized:
        """NNCF on the ov.Model (not the ONNX file: on this opset-11 graph that gives no
        boxes), the recipe's float nodes (`kept_in_float`) in NNCF's ignored scope; the
        model read with its x * HardSigmoid(x) pairs fused into HardSwish (hard_swish.py)
        and each channel split of a conv's output folded into one conv per piece
        (split_convs.py; a kept conv's pieces stay kept) and a Focus stem into one strided
        conv (focus.py: YOLOX) and each channel shuffle into its concat (shuffle.py:
        ShuffleNet blocks). The rewrites are exact. The file
        goes in through `ov.convert_model`, not `Core.read_model`: its fusions and constant
        folding (x * Sigmoid(x) into Swish, the dynamic batch's shape arithmetic) happen
        before NNCF places its quantizers, so the CPU plugin runs the quantized depthwise
        convs in INT8 (f32 before: 1.9 of 14.2 ms of PicoDet-S, docs/models.md) and keeps
        YOLOX-nano's SiLU fused into its convs."""
        import tempfile

        import nncf

        kept = kept_in_float(self._path, onnx_model, recipe, calibration)
        with tempfile.TemporaryDirectory(prefix="strata-int8-") as folder:
            src, fused = hard_swish_file(self._path, Path(folder))
            src, folds = fold_file(src, Path(folder))
            src, stems = focus_file(src, Path(folder))
            src, shuffles = shuffle_file(src, Path(folder))
            model = self._ov.convert_model(str(src))
        kept = piece_names(kept, folds)
        # OpenVINO names a Conv's ops NAME/WithoutBiases (the convolution) and NAME (its bias).
        pattern = "^(" + "|".join(re.escape(n) for n in kept) + ")(/.*)?$"
        dataset = nncf.Dataset(list(calibration), lambda x: x[None])
        preset = (
            nncf.QuantizationPreset.MIXED
            if recipe.preset == "mixed"
            else nncf.QuantizationPreset.PERFORMANCE
        )
        quantized = nncf.quantize(
            model,
            dataset,
            preset=preset,
            subset_size=len(calibration),
            fast_bias_correction=recipe.fast_bias_correction,
            ignored_scope=nncf.IgnoredScope(patterns=[pattern], validate=False),
        )
        ov = self._ov

        def save(stem: Path) -> list[Path]:
            # with_suffix would take ".int8-openvino" for a suffix and write model.xml.
            xml = stem.with_name(f"{stem.name}.xml")
            ov.save_model(quantized, str(xml), compress_to_fp16=False)
            return [xml, xml.with_suffix(".bin")]

        notes = []
        if fused:
            notes.append(f"{fused} x * HardSigmoid(x) pairs fused into HardSwish")
        if folds:
            notes.append(f"{len(folds)} channel splits of a conv's output folded into its conv")
        if shuffles:
            notes.append(f"{len(shuffles)} channel shuffles folded into their concats")
        if stems:
            notes.append(f"{len(stems)} Focus stem(s) folded into one strided conv")
        note = "; ".join(notes) + " before quantizing" if notes else ""
        return Quantized(self._runner(quantized), save, kept, ".xml", note)

    @staticmethod
    def version() -> str:
        import nncf
        import openvino

        return f"openvino {openvino.__version__}, nncf {nncf.__version__}"


class OnnxRuntimeEngine:
    """ONNX Runtime: the existing QDQ quantize_static path, nodes_to_exclude for the head."""

    name: Engine = "onnxruntime"

    def __init__(self, onnx_path: Path, outputs: Sequence[str], threads: int) -> None:
        self._path = onnx_path
        self._outputs = list(outputs)
        self._threads = threads

    def fp32(self) -> Runner:
        """The FP32 model in an ONNX Runtime CPU session."""
        return self._runner(self._path)

    def _runner(self, path: Path) -> Runner:
        from strata.tools.models.quantize import _session

        session = _session(path, self._threads)
        name = session.get_inputs()[0].name
        outputs = self._outputs

        def run(batch: np.ndarray) -> list[np.ndarray]:
            return list(session.run(outputs, {name: batch}))

        return run

    def quantize(self, calibration: np.ndarray, recipe: Recipe, onnx_model: Any) -> Quantized:
        """quantize_static (QDQ, per-channel S8 weights, U8 activations, convolutions'
        inputs only) into a temporary file, the recipe's float nodes (`kept_in_float`) in
        nodes_to_exclude."""
        import tempfile

        from strata.tools.models.quantize import quantize_file

        kept = kept_in_float(self._path, onnx_model, recipe, calibration)
        pattern = "^(" + "|".join(re.escape(n) for n in kept) + ")$"
        folder = Path(tempfile.mkdtemp(prefix="strata-int8-"))
        tmp = folder / "model.int8.onnx"
        name = onnx_model.graph.input[0].name
        quantize_file(
            _opset13(self._path, onnx_model, folder / "opset13.onnx"),
            tmp, calibration, name, recipe.method, (), pattern, "detect", False,
            conv_inputs_only=True,
        )  # fmt: skip

        def save(stem: Path) -> list[Path]:
            import shutil

            # Not with_suffix: on model.int8-onnxruntime it names the FP32 model.onnx.
            dst = stem.with_name(f"{stem.name}.onnx")
            shutil.copyfile(tmp, dst)
            return [dst]

        return Quantized(self._runner(tmp), save, kept, ".onnx")

    @staticmethod
    def version() -> str:
        import onnxruntime

        return f"onnxruntime {onnxruntime.__version__} quantize_static (QDQ)"


def _opset13(path: Path, model: Any, dst: Path) -> Path:
    """`path`, or a copy of it converted to opset 13 when older: per-channel QDQ
    (DequantizeLinear's axis) needs 13, and an opset-11 file quantizes into a graph ONNX
    Runtime refuses to load."""
    import onnx
    from onnx import version_converter

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset >= 13:
        return path
    onnx.save(version_converter.convert_version(model, 13), str(dst))
    return dst


def make_engine(
    engine: Engine, onnx_path: Path, outputs: Sequence[str], threads: int
) -> OpenVinoEngine | OnnxRuntimeEngine:
    """The engine, once `require` has said its packages are there."""
    require(engine)
    if engine == "openvino":
        return OpenVinoEngine(onnx_path, outputs, threads)
    return OnnxRuntimeEngine(onnx_path, outputs, threads)


def frames_per_second(a: Runner, b: Runner, batch: np.ndarray, runs: int) -> tuple[float, float]:
    """Batch-1 frames a second of two runners, interleaved so load changes hit both alike
    (medians of the per-run times)."""
    for _ in range(2):
        a(batch)
        b(batch)
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(max(runs, 1)):
        for run, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            run(batch)
            out.append(time.perf_counter() - t0)
    return 1.0 / float(np.median(ta)), 1.0 / float(np.median(tb))
