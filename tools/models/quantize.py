"""INT8 static quantization with onnxruntime.quantization, calibrated on a real clip.

The seed's AutoQuant, made explicit: choose a calibrator (entropy, minmax, percentile) and a
number of frames, keep listed operator types in float (LayerNormalization and Softmax are
where transformers lose most), and for YOLO keep the decode tail in float (its final
Concat mixes pixel coordinates with 0-1 scores, which one INT8 scale cannot hold). The
result is measured against the float model on other frames of the same clip: top-1
agreement for classifiers, box F1 at IoU 0.5 for detectors, and latency for both.
"""

from __future__ import annotations

import logging
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from strata.shared.models.manifest import Calibration, Manifest, Variant, save_manifest
from strata.shared.models.repository import ModelError, ModelRepository, sha256_of
from strata.tools.models.agreement import OutputAgreement, agreement
from strata.tools.models.inputs import prepare
from strata.tools.models.onnx_graph import producers

log = logging.getLogger(__name__)

Method = Literal["entropy", "minmax", "percentile"]
MethodChoice = Literal["entropy", "minmax", "percentile", "auto"]
DEFAULT_KEEP_FLOAT = ("LayerNormalization", "Softmax")


@dataclass(frozen=True, slots=True)
class QuantizeRequest:
    """What `strata models quantize` was asked for."""

    name: str
    clip: Path
    method: MethodChoice = "entropy"
    samples: int = 32
    keep_float: tuple[str, ...] = DEFAULT_KEEP_FLOAT
    exclude_nodes: str = ""  # regex over node names, kept in float as well
    eval_frames: int = 32
    timing_runs: int = 20
    threads: int = 0
    conf: float = 0.25
    iou: float = 0.45
    variant: str = "int8"
    progress: bool = True


@dataclass(frozen=True, slots=True)
class Timing:
    """Latency of one batch-1 inference, milliseconds."""

    median_ms: float
    p90_ms: float
    runs: int


@dataclass(frozen=True, slots=True)
class QuantizeReport:
    """Everything `quantize` measured; written to the manifest and printed."""

    name: str
    path: Path
    method: Method
    samples: int
    kept_float_nodes: int
    agreement: OutputAgreement
    float_timing: Timing
    int8_timing: Timing
    float_bytes: int
    int8_bytes: int
    notes: list[str] = field(default_factory=list)
    tried: dict[str, OutputAgreement] = field(default_factory=dict)  # method -> agreement

    @property
    def speedup(self) -> float:
        """Float median latency over INT8 median latency."""
        return self.float_timing.median_ms / max(self.int8_timing.median_ms, 1e-9)


def read_frames(
    clip: Path, count: int, phase: float = 0.0, progress: bool = False
) -> list[np.ndarray]:
    """`count` BGR frames spread evenly over the clip, starting `phase` (0-1) of a stride in."""
    import av
    from tqdm import tqdm

    if not clip.is_file():
        raise FileNotFoundError(f"calibration clip {clip} not found")
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        total = stream.frames
        if total <= 0:  # unknown length: count once (decoding only, no conversion)
            total = sum(1 for _ in container.decode(stream))
            container.seek(0)
        stride = max(total / max(count, 1), 1.0)
        wanted = {min(int(i * stride + phase * stride), total - 1) for i in range(count)}
        frames: list[np.ndarray] = []
        bar = tqdm(total=len(wanted), desc=f"frames {clip.name}", disable=not progress)
        for i, frame in enumerate(container.decode(stream)):
            if i in wanted:
                frames.append(frame.to_ndarray(format="bgr24"))
                bar.update(1)
                if len(frames) == len(wanted):
                    break
        bar.close()
    if not frames:
        raise ValueError(f"no frames decoded from {clip}")
    return frames


class _Reader:
    """onnxruntime CalibrationDataReader over prepared inputs, one image per call.

    It supports `set_range`, so onnxruntime can calibrate in chunks (CalibStridedMinMax):
    its calibrators otherwise keep every intermediate tensor of every sample in memory at
    once (about 250 MB per sample for YOLOv8n at 640).
    """

    def __init__(self, input_name: str, batch: np.ndarray, progress: bool) -> None:
        from tqdm import tqdm

        self._name = input_name
        self._batch = batch
        self._pos, self._end = 0, len(batch)
        self._bar = tqdm(total=len(batch), desc="calibrate", disable=not progress)

    def __len__(self) -> int:
        return len(self._batch)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._pos, self._end = start_index, min(end_index, len(self._batch))

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._pos >= self._end:
            if self._end >= len(self._batch):
                self._bar.close()
            return None
        x = self._batch[self._pos : self._pos + 1]
        self._pos += 1
        self._bar.update(1)
        return {self._name: x}

    def rewind(self) -> None:
        self._pos = 0


def calibration_stride(samples: int, most: int = 4) -> int:
    """The largest chunk size <= most that divides `samples` (onnxruntime requires it)."""
    return next(d for d in range(min(most, samples), 0, -1) if samples % d == 0)


def float_nodes(model: Any, keep_types: tuple[str, ...], pattern: str, task: str) -> list[str]:
    """Names of nodes to keep in float: listed op types, `pattern` matches, a YOLO decode tail."""
    keep = {n.name for n in model.graph.node if n.op_type in keep_types}
    if pattern:
        rx = re.compile(pattern)
        keep |= {n.name for n in model.graph.node if rx.search(n.name)}
    if task == "detect":
        keep |= _decode_tail(model)
    return sorted(k for k in keep if k)


def _decode_tail(model: Any) -> set[str]:
    """The nodes after the detection head's last learned convolutions.

    Walks back from the outputs through everything that is not a learned Conv; a Conv fed
    by a Softmax is the DFL integral (fixed weights 0..15), part of the decode, so the walk
    goes through it.
    """
    writers = producers(model.graph)
    tail: set[str] = set()
    stack = [o.name for o in model.graph.output]
    while stack:
        node = writers.get(stack.pop())
        if node is None or node.name in tail:
            continue
        if node.op_type == "Conv":
            src = writers.get(node.input[0])
            if src is None or src.op_type != "Softmax":
                continue
        tail.add(node.name)
        stack.extend(i for i in node.input if i)
    return tail


def quantize_file(
    src: Path,
    dst: Path,
    batch: np.ndarray,
    input_name: str,
    method: Method,
    keep_float: tuple[str, ...],
    exclude_pattern: str,
    task: str,
    progress: bool = True,
    conv_inputs_only: bool = False,
) -> int:
    """Static INT8 (QDQ, per-channel S8 weights, U8 activations) of `src` into `dst`.

    `conv_inputs_only`: quantize only convolutions' inputs, as NNCF does for OpenVINO: no
    Q/DQ on a conv's output and none on other ops (hard-swish's HardSigmoid and Mul,
    pooling, concat), one Q/DQ pair per consumer (docs/models.md: without it PicoDet-S's
    QDQ graph agrees with FP32 at box F1 0.000). A tensor that a quantized conv reads is
    still read through its Q/DQ by a conv kept in float beside it.
    Returns how many nodes were kept in float.
    """
    import onnx
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {
        "entropy": CalibrationMethod.Entropy,
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
    }
    with tempfile.TemporaryDirectory() as tmp:
        prepped = Path(tmp) / "prep.onnx"
        try:
            quant_pre_process(str(src), str(prepped), skip_symbolic_shape=True)
        except Exception as exc:  # pre-processing is an optimisation; quantize without it
            log.warning("quant_pre_process failed (%s); quantizing the model as it is", exc)
            prepped = src
        # Names are taken from the model actually quantized: pre-processing may rename.
        exclude = float_nodes(
            onnx.load(str(prepped), load_external_data=False), keep_float, exclude_pattern, task
        )
        log.info(
            "quantizing %s (%s, %d frames, %d nodes in float)",
            src.name,
            method,
            len(batch),
            len(exclude),
        )
        extra, only = _qdq_options(method, len(batch), conv_inputs_only)
        # onnxruntime.quantization logs every tensor it touches on the root logger.
        root = logging.getLogger()
        level = root.level
        root.setLevel(max(level, logging.WARNING))
        try:
            quantize_static(
                str(prepped),
                str(dst),
                _Reader(input_name, batch, progress),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=exclude,
                calibrate_method=methods[method],
                extra_options=extra,
                **only,
            )
        finally:
            root.setLevel(level)
    return len(exclude)


def _qdq_options(
    method: Method, frames: int, conv_inputs_only: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """quantize_static's extra_options, and its keyword arguments for `conv_inputs_only`."""
    extra: dict[str, Any] = {
        "CalibTensorRangeSymmetric": False,
        # Calibrate in chunks: histograms and ranges merge across them, memory stays flat.
        "CalibStridedMinMax": calibration_stride(frames),
    }
    if method == "percentile":
        extra["CalibPercentile"] = 99.999
    only: dict[str, Any] = {}
    if conv_inputs_only:
        extra["DedicatedQDQPair"] = True
        extra["OpTypesToExcludeOutputQuantization"] = ["Conv"]
        only["op_types_to_quantize"] = ["Conv"]
    return extra, only


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads > 0:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run_batched(session: Any, name: str, batch: np.ndarray, desc: str, progress: bool) -> Any:
    """Outputs for every image of `batch`, one at a time (the way a tier meets them)."""
    from tqdm import tqdm

    outs = [
        session.run(None, {name: batch[i : i + 1]})[0]
        for i in tqdm(range(len(batch)), desc=desc, disable=not progress)
    ]
    return np.concatenate(outs, axis=0)


def time_pair(a: Any, b: Any, name: str, x: np.ndarray, runs: int) -> tuple[Timing, Timing]:
    """Batch-1 latency of two sessions, runs interleaved so load changes hit both alike."""
    for _ in range(2):
        a.run(None, {name: x})
        b.run(None, {name: x})
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(runs):
        for sess, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            sess.run(None, {name: x})
            out.append((time.perf_counter() - t0) * 1e3)
    return _timing(ta), _timing(tb)


def _timing(times: list[float]) -> Timing:
    times = sorted(times)
    p90 = times[min(len(times) - 1, round(0.9 * (len(times) - 1)))]
    return Timing(statistics.median(times), p90, len(times))


def quantize(
    repository: ModelRepository, req: QuantizeRequest, into: ModelRepository | None = None
) -> QuantizeReport:
    """Quantize `req.name`, measure it, and record it as variant `req.variant` in `into`.

    With method "auto" every calibrator is tried and the one whose model agrees best with
    the float model is kept (ties: the smaller output error); the others' figures are in
    `report.tried`.
    """
    target = into or repository
    manifest, _, src = repository.file_of(req.name)
    if manifest.precision != "fp32":
        raise ModelError(f"model {req.name!r}: quantize needs an fp32 primary file")
    if target.root != repository.root:
        src = copy_model(repository, target, req.name)
    calib = prepare(manifest.input, read_frames(req.clip, req.samples, 0.0, req.progress))
    # Evaluate on frames between the calibration ones, so the two sets do not overlap.
    evals = prepare(manifest.input, read_frames(req.clip, req.eval_frames, 0.5, req.progress))
    name = manifest.input.name
    f_sess = _session(src, req.threads)
    ref = run_batched(f_sess, name, evals, "fp32", req.progress)
    # One file per variant key, so a second calibration (e.g. --variant int8-minmax) keeps
    # the first.
    dst = src.with_name(f"{src.stem}.{req.variant}.onnx")
    method, agree, n_float, tried = _calibrate(req, manifest, src, dst, calib, evals, ref)
    del calib
    q_sess = _session(dst, req.threads)
    f_time, q_time = time_pair(f_sess, q_sess, name, evals[:1], req.timing_runs)

    notes = []
    if not manifest.source.trained:
        notes.append("untrained weights: agreement of random-weight models, not of real ones")
    if agree.value is None:
        notes.append(f"no boxes above conf {req.conf} from either model: box F1 undefined")
    _record(target, req, dst, method, n_float, agree)
    return QuantizeReport(
        name=req.name,
        path=dst,
        method=method,
        samples=req.samples,
        kept_float_nodes=n_float,
        agreement=agree,
        float_timing=f_time,
        int8_timing=q_time,
        float_bytes=src.stat().st_size,
        int8_bytes=dst.stat().st_size,
        notes=notes,
        tried=tried,
    )


def _calibrate(
    req: QuantizeRequest,
    manifest: Manifest,
    src: Path,
    dst: Path,
    calib: np.ndarray,
    evals: np.ndarray,
    ref: np.ndarray,
) -> tuple[Method, OutputAgreement, int, dict[str, OutputAgreement]]:
    """Quantize with each method asked for; keep the best-agreeing file at `dst`."""
    name = manifest.input.name
    methods: list[Method] = (
        ["entropy", "minmax", "percentile"] if req.method == "auto" else [req.method]
    )
    tried: dict[str, OutputAgreement] = {}
    best: tuple[Method, OutputAgreement, int] | None = None
    for method in methods:
        out = dst if len(methods) == 1 else dst.with_name(f"{dst.stem}.{method}.onnx")
        n_float = quantize_file(
            src, out, calib, name, method, req.keep_float, req.exclude_nodes, manifest.task,
            req.progress,
        )  # fmt: skip
        test = run_batched(_session(out, req.threads), name, evals, method, req.progress)
        agree = agreement(manifest, ref, test, req.conf, req.iou)
        tried[method] = agree
        if best is None or _rank(agree) > _rank(best[1]):
            best = (method, agree, n_float)
            if out != dst:
                out.replace(dst)
        if out != dst and out.exists():
            out.unlink()
    assert best is not None
    return (*best, tried)


def _record(
    target: ModelRepository,
    req: QuantizeRequest,
    dst: Path,
    method: Method,
    n_float: int,
    agree: OutputAgreement,
) -> None:
    """The INT8 file as variant `req.variant` of the model's manifest."""
    variant = Variant(
        file=dst.name,
        sha256=sha256_of(dst),
        format="onnx",
        precision="int8",
        made_by=(
            f"strata models quantize (onnxruntime {_ort_version()} quantize_static, QDQ, "
            "per-channel S8 weights, U8 activations)"
        ),
        calibration=Calibration(
            method=method,
            samples=req.samples,
            clip=req.clip.name,
            kept_float=req.keep_float,
            excluded_nodes=n_float,
            agreement=agree.value,
        ),
    )
    current = target.manifest(req.name)
    save_manifest(
        current.model_copy(update={"variants": {**current.variants, req.variant: variant}}),
        target.folder(req.name),
    )


def _rank(a: OutputAgreement) -> tuple[float, float]:
    # Higher agreement first (undefined counts as neither good nor bad), then lower error.
    return (a.value if a.value is not None else -1.0, -a.output_rel_error)


def copy_model(src: ModelRepository, dst: ModelRepository, name: str) -> Path:
    """Copy a model's manifest and primary file into another repository; returns the file."""
    import shutil

    manifest, _, path = src.file_of(name)
    folder = dst.folder(name)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / manifest.file
    if target.exists() and sha256_of(target) == manifest.sha256:
        return target  # copied before; keep the variants recorded there
    shutil.copyfile(path, target)
    # Variants stay behind: their files were not copied.
    save_manifest(manifest.model_copy(update={"variants": {}}), folder)
    return target


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)
