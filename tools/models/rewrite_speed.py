"""What the quantizer's graph rewrites and INT8 buy, measured in one process.

    python -m strata.tools.models.rewrite_speed --int8 A.xml [--int8 B.xml] \
        [--model picodet_s_416] [--clip data/vtest_b.mp4] [--threads 1 2] [--batch 1 4] \
        [--rounds 40] [--profile]

Runs, interleaved round-robin so load from other processes hits all alike, on frames of
the clip written by the edge's preprocessing: ONNX Runtime FP32 on the model file as a user
runs it, ONNX Runtime FP32 on the rewritten file (hard-swish fused, conv splits folded:
what the rewrites alone give), OpenVINO FP32 on both, and each given OpenVINO INT8 IR.
Batch 1 is one synchronous request (OpenVINO's LATENCY hint); a larger batch runs
OpenVINO in its THROUGHPUT mode (streams, one asynchronous request each kept busy, as the
edge's back end) and ONNX Runtime synchronously. Per frame: the median and p90 wall time
and the median process CPU time (steadier on a loaded machine). `--profile` adds
OpenVINO's per-layer counters (PERF_COUNT, batch 1, 1 thread) summed by layer type.
Needs the openvino extra.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Runs one timed unit (a few batches, or one batch at batch 1) and waits for it.
Unit = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One model file and the engine that runs it."""

    label: str
    path: Path
    engine: str  # "onnxruntime" or "openvino"


@dataclass(frozen=True, slots=True)
class Timing:
    """Per-frame figures of one candidate, milliseconds."""

    label: str
    wall_ms: float
    p90_ms: float
    cpu_ms: float


@dataclass(frozen=True, slots=True)
class LayerTime:
    """OpenVINO's counters for one (layer type, kernel) pair, per inference."""

    layer: str
    kernel: str
    count: int
    ms: float


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _ort_unit(path: Path, x: np.ndarray, threads: int, batches: int) -> Unit:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: x}

    def unit() -> None:
        for _ in range(batches):
            s.run(None, feed)

    return unit


def _ov_unit(path: Path, x: np.ndarray, threads: int, batches: int) -> Unit:
    import openvino as ov

    hint = "LATENCY" if x.shape[0] == 1 else "THROUGHPUT"
    config: dict[str, Any] = {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": hint,
    }
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    if hint == "LATENCY":
        request = compiled.create_infer_request()

        def sync() -> None:
            for _ in range(batches):
                request.infer({0: x})

        return sync
    queue = ov.AsyncInferQueue(
        compiled, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    )

    def stream() -> None:
        for _ in range(batches):
            queue.start_async({0: x})
        queue.wait_all()

    return stream


def interleaved(
    candidates: Sequence[Candidate], x: np.ndarray, threads: int, rounds: int
) -> list[Timing]:
    """Each candidate's per-frame times over `rounds` round-robin rounds on batch `x`
    (4 batches a round above batch 1, so every stream has work)."""
    batches = 1 if x.shape[0] == 1 else 4
    units = [
        (_ort_unit if c.engine == "onnxruntime" else _ov_unit)(c.path, x, threads, batches)
        for c in candidates
    ]
    for unit in units:
        unit()
        unit()
    wall: dict[int, list[float]] = defaultdict(list)
    cpu: dict[int, list[float]] = defaultdict(list)
    frames = batches * x.shape[0]
    for _ in range(max(rounds, 1)):
        for i, unit in enumerate(units):
            c0, t0 = _cpu_s(), time.perf_counter()
            unit()
            t1, c1 = time.perf_counter(), _cpu_s()
            wall[i].append((t1 - t0) * 1e3 / frames)
            cpu[i].append((c1 - c0) * 1e3 / frames)
    return [
        Timing(
            c.label,
            float(np.median(wall[i])),
            float(np.percentile(wall[i], 90)),
            float(np.median(cpu[i])),
        )
        for i, c in enumerate(candidates)
    ]


def layer_times(path: Path, x: np.ndarray, runs: int = 20) -> list[LayerTime]:
    """OpenVINO's per-layer counters for `path` (1 thread, batch of `x`), summed by layer
    type and kernel, per inference, largest first."""
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1, "PERF_COUNT": True}
    request = ov.Core().compile_model(str(path), "CPU", config).create_infer_request()
    for _ in range(3):
        request.infer({0: x})
    total: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for _ in range(max(runs, 1)):
        request.infer({0: x})
        for p in request.profiling_info:
            if p.status == p.Status.EXECUTED:
                key = (p.node_type, p.exec_type)
                total[key] += p.real_time.total_seconds() * 1e3
                count[key] += 1
    n = max(runs, 1)
    rows = [LayerTime(k[0], k[1], count[k] // n, total[k] / n) for k in total]
    return sorted(rows, key=lambda r: -r.ms)


def rewritten(src: Path, folder: Path) -> Path:
    """`src` with the quantizer's exact rewrites (hard_swish, split_convs, focus, shuffle)."""
    from strata.tools.models.focus import focus_file
    from strata.tools.models.hard_swish import hard_swish_file
    from strata.tools.models.shuffle import shuffle_file
    from strata.tools.models.split_convs import fold_file

    fused, _ = hard_swish_file(src, folder)
    folded, _ = fold_file(fused, folder)
    stem, _ = focus_file(folded, folder)
    shuffled, _ = shuffle_file(stem, folder)
    return shuffled


def candidates(src: Path, rewrite: Path, int8: Sequence[Path]) -> list[Candidate]:
    """The runs compared, the first the reference (ONNX Runtime FP32 on the file)."""
    out = [
        Candidate("onnxruntime fp32", src, "onnxruntime"),
        Candidate("onnxruntime fp32 rewritten", rewrite, "onnxruntime"),
        Candidate("openvino fp32", src, "openvino"),
        Candidate("openvino fp32 rewritten", rewrite, "openvino"),
    ]
    out += [Candidate(f"openvino int8 {p}", p, "openvino") for p in int8]
    return out


def table(timings: Sequence[Timing], threads: int, batch: int, rounds: int) -> str:
    """A markdown table, speed-up over the first row by wall time."""
    ref = timings[0].wall_ms
    lines = [
        f"threads {threads}, batch {batch}, {rounds} rounds interleaved "
        f"(load average {os.getloadavg()[0]:.1f})",
        "| run | ms/frame median | p90 | CPU ms/frame | frames/s | x over first |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for t in timings:
        lines.append(
            f"| {t.label} | {t.wall_ms:.2f} | {t.p90_ms:.2f} | {t.cpu_ms:.2f} | "
            f"{1e3 / t.wall_ms:.1f} | x{ref / t.wall_ms:.2f} |"
        )
    return "\n".join(lines)


def _frames(model: str, clip: Path, n: int) -> np.ndarray:
    from strata.shared.models import ModelRepository, starter_repository
    from strata.tools.models.site_int8 import edge_batch, site_frames

    manifest, _, _ = ModelRepository(starter_repository()).file_of(model)
    batch, _ = edge_batch(manifest, site_frames([clip], n))
    return batch


def main(argv: Sequence[str] | None = None) -> int:
    from strata.shared.models import starter_repository

    ap = argparse.ArgumentParser(prog="python -m strata.tools.models.rewrite_speed")
    ap.add_argument("--model", default="picodet_s_416")
    ap.add_argument("--int8", type=Path, action="append", default=[])
    ap.add_argument("--clip", type=Path, default=Path("data/vtest_b.mp4"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    src = starter_repository() / args.model / "model.onnx"
    frames = _frames(args.model, args.clip, max(args.batch))
    with tempfile.TemporaryDirectory(prefix="strata-speed-") as folder:
        runs = candidates(src, rewritten(src, Path(folder)), args.int8)
        for threads in args.threads:
            for batch in args.batch:
                timings = interleaved(runs, frames[:batch], threads, args.rounds)
                print(table(timings, threads, batch, args.rounds), flush=True)
        if args.profile:
            for c in runs:
                if c.engine != "openvino":
                    continue
                layers = layer_times(c.path, frames[:1])
                print(f"\n{c.label}: {sum(r.ms for r in layers):.2f} ms in counters")
                for r in layers:
                    if r.ms >= 0.05:
                        print(f"  {r.ms:6.2f} ms x{r.count:3d} {r.layer} {r.kernel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
