"""Standby against cold start: `strata bench standby`.

Each measurement runs in a fresh process (so memory is that process's alone), with the
imports done before the clock starts:

    cold     build the engine or session, allocate the batch buffers, run the first batch
             on every slot: the time from nothing to serving, and the memory of a live copy
    standby  build the engine or session only (StandbyModel): the memory a standby holds;
             then take_over(): buffers and the first batches, the time a take-over costs

Memory on the CPU (`--backend onnxruntime-cpu`, the default) is the process's resident set
(VmRSS) above what it held after the imports. On a GPU back end (`--backend tensorrt`,
`onnxruntime-cuda`, `onnxruntime-tensorrt`, `torch-cuda`) it is the runner's device
`memory_used()` above the device's before the build (cudaMemGetInfo, so the GPU must be
otherwise idle; torch-cuda: PyTorch's allocated bytes), beside the resident set and the
runner's pinned and device I/O buffer bytes. On a GPU a priming run first builds the
TensorRT engine into `--engine-cache` (not timed): both paths then load the cached engine,
as an edge with a model repository's prebuilt engine does.
Rounds alternate cold and standby, so other load on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from strata.shared.models import ModelRepository

CPU = "onnxruntime-cpu"
MIB = 1 << 20


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _device_used(backend: str, device_id: int) -> Callable[[], int]:
    """Bytes in use on the device as the runner of `backend` counts them (GPU only)."""
    if backend == "torch-cuda":
        import torch

        return lambda: int(torch.cuda.memory_allocated(device_id))
    from strata.shared.runtime.cuda import Cuda

    cuda = Cuda.for_device(device_id)  # the CUDA context exists before the base reading
    return cuda.memory_used


def _runner_memory(runner: object) -> int:
    """The GPU runner's `memory_used()` (device bytes; every GPU back end has it)."""
    used: Callable[[], int] = getattr(runner, "memory_used")  # noqa: B009 - not in StagedRunner
    return int(used())


@dataclass(frozen=True, slots=True)
class ChildArgs:
    """What one measurement process runs."""

    mode: str
    model: str
    batch: int
    threads: int
    backend: str
    device_id: int
    streams: int
    fp16: bool
    engine_cache: str


def _child(a: ChildArgs) -> dict[str, float]:
    """One measurement in this (fresh) process."""
    from strata.edge.inference.standby import StandbyModel
    from strata.shared.config.edge import EdgeConfig
    from strata.shared.runtime import create_runner  # noqa: F401  (imports before the clock)
    from strata.shared.runtime.staging import HostStagedRunner  # noqa: F401

    runtime: dict[str, object] = {"backend": a.backend, "threads": a.threads}
    if a.backend != CPU:
        runtime.update(
            device_id=a.device_id,
            streams=a.streams,
            fp16=a.fp16,
            engine_cache=a.engine_cache,
            max_batch=a.batch,
            opt_batch=min(4, a.batch),
        )
    cfg = EdgeConfig.model_validate({"runtime": runtime})
    gpu = _device_used(a.backend, a.device_id) if a.backend != CPU else None
    base = _rss_mib()
    dev_base = gpu() if gpu else 0
    t0 = time.perf_counter()
    standby = StandbyModel(a.model, cfg, max_batch=a.batch)
    built = time.perf_counter()
    held = _rss_mib() - base
    dev_held = (_runner_memory(standby.runner) - dev_base) / MIB if gpu else 0.0
    io_held = standby.io_bytes() / MIB
    t1 = time.perf_counter()
    staged = standby.take_over()
    served = time.perf_counter()
    live = _rss_mib() - base
    dev_live = (_runner_memory(staged) - dev_base) / MIB if gpu else 0.0
    io_live = staged.io_bytes() / MIB
    # A second batch: what one batch costs once warm (the inference both paths must do).
    n = int(staged.host_input(0).shape[0])
    t2 = time.perf_counter()
    slot = staged.acquire()
    staged.launch(slot, n)
    staged.wait(slot, n)
    batch_s = time.perf_counter() - t2
    staged.close()
    live_figures = {
        "live_mib": live,
        "live_device_mib": dev_live,
        "live_io_mib": io_live,
        "batch_s": batch_s,
    }
    if a.mode == "cold":
        return {"ready_s": served - t0, **live_figures}
    return {
        "build_s": built - t0,
        "standby_mib": held,
        "standby_device_mib": dev_held,
        "standby_io_mib": io_held,
        "take_over_s": served - t1,
        **live_figures,
    }


@dataclass(frozen=True, slots=True)
class Report:
    """Medians over the rounds. Memory in MiB; device figures 0 on the CPU."""

    model: str
    backend: str
    batch: int
    rounds: int
    cold_start_s: float
    standby_build_s: float
    take_over_s: float
    warm_batch_s: float
    # Cold start and take-over less one warm batch: the loading each path still does.
    cold_overhead_s: float
    take_over_overhead_s: float
    standby_mib: float
    live_mib: float
    standby_device_mib: float
    live_device_mib: float
    standby_io_mib: float
    live_io_mib: float
    take_over_ratio: float
    memory_ratio: float
    loadavg: str


def _run_child(a: ChildArgs) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "strata.tools.cli", "bench", "standby", "--child", a.mode,
         "--model", a.model, "--batch", str(a.batch), "--threads", str(a.threads),
         "--backend", a.backend, "--device-id", str(a.device_id), "--streams", str(a.streams),
         "--fp16" if a.fp16 else "--no-fp16", "--engine-cache", a.engine_cache],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def measure(base: ChildArgs, rounds: int) -> Report:
    """Alternate cold and standby processes; medians."""
    if base.backend != CPU:
        _run_child(base)  # priming: builds and caches the engine (not counted)
    runs: dict[str, list[dict[str, float]]] = {"cold": [], "standby": []}
    for _ in range(rounds):
        for mode in ("cold", "standby"):
            runs[mode].append(_run_child(ChildArgs(**{**asdict(base), "mode": mode})))

    def med(mode: str, key: str) -> float:
        return float(np.median([r[key] for r in runs[mode]]))

    gpu = base.backend != CPU
    cold, take = med("cold", "ready_s"), med("standby", "take_over_s")
    kind = "_device_mib" if gpu else "_mib"
    held, live = med("standby", "standby" + kind), med("cold", "live" + kind)
    return Report(
        model=base.model,
        backend=base.backend,
        batch=base.batch,
        rounds=rounds,
        cold_start_s=cold,
        standby_build_s=med("standby", "build_s"),
        take_over_s=take,
        warm_batch_s=med("cold", "batch_s"),
        cold_overhead_s=cold - med("cold", "batch_s"),
        take_over_overhead_s=take - med("standby", "batch_s"),
        standby_mib=med("standby", "standby_mib"),
        live_mib=med("cold", "live_mib"),
        standby_device_mib=med("standby", "standby_device_mib"),
        live_device_mib=med("cold", "live_device_mib"),
        standby_io_mib=med("standby", "standby_io_mib"),
        live_io_mib=med("cold", "live_io_mib"),
        take_over_ratio=take / cold if cold else 0.0,
        memory_ratio=held / live if live else 0.0,
        loadavg=Path("/proc/loadavg").read_text().split(" ")[0],
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench standby`'s options."""
    p.add_argument("--model", default="", help="ONNX file (default: starter yolov8n)")
    p.add_argument("--backend", default=CPU, help="runtime back end (see shared/runtime)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="CPU intra-op threads")
    p.add_argument("--device-id", type=int, default=0, help="GPU: CUDA device")
    p.add_argument("--streams", type=int, default=2, help="GPU: streams (slots)")
    p.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=True, help="GPU")
    p.add_argument(
        "--engine-cache", default="", help="GPU: TensorRT engine folder (default: the user's)"
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default="")
    p.add_argument("--child", choices=["cold", "standby"], help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Alternating rounds in fresh processes (or, with --child, one measurement)."""
    model = args.model
    if not model:
        model = str(ModelRepository().file_of("yolov8n")[2])
    child = ChildArgs(
        mode=args.child or "cold",
        model=model,
        batch=args.batch,
        threads=args.threads,
        backend=args.backend,
        device_id=args.device_id,
        streams=args.streams,
        fp16=args.fp16,
        engine_cache=args.engine_cache,
    )
    if args.child:
        print(json.dumps(_child(child)))
        return 0
    report = measure(child, args.rounds)
    print(json.dumps(asdict(report), indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(report), indent=1))
    return 0
