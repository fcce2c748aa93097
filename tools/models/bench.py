"""`strata models bench`: a model's variants side by side on one clip, in one run.

Every variant is loaded through the repository (checksums and shapes checked), runs the
same frames, and is compared with the first variant (the reference): agreement as in
`quantize`, and latency with the variants' runs interleaved round-robin so that load from
other processes hits all of them alike.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from strata.shared.machine import cpu_line
from strata.shared.models.repository import LoadedModel, ModelRepository
from strata.tools.models.agreement import OutputAgreement, agreement
from strata.tools.models.inputs import prepare
from strata.tools.models.quantize import read_frames


@dataclass(frozen=True, slots=True)
class VariantResult:
    """One variant's figures."""

    variant: str
    precision: str
    file_bytes: int
    median_ms: float
    p90_ms: float
    cpu_ms: float  # median process CPU time per run: steadier than wall time under load
    agreement: OutputAgreement | None  # None for the reference itself


@dataclass(frozen=True, slots=True)
class BenchReport:
    """The comparison, with what it ran on."""

    name: str
    batch: int
    runs: int
    frames: int
    machine: str
    results: list[VariantResult]

    def markdown(self) -> str:
        """A markdown table of the results."""
        ref = self.results[0]
        lines = [
            f"| {self.name} | precision | size MB | median ms | p90 ms | CPU ms | speed-up "
            "(wall / CPU) | agreement |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in self.results:
            if r.agreement is None:
                agree = "reference"
            elif r.agreement.value is None:
                agree = f"{r.agreement.metric} undefined (no boxes)"
            else:
                agree = f"{r.agreement.metric} {r.agreement.value:.3f}"
            if r.agreement is not None and r.agreement.metric == "box_f1":
                agree += f" ({r.agreement.reference_items} vs {r.agreement.test_items} boxes)"
            if r.agreement is not None:
                agree += f", rel. error {r.agreement.output_rel_error:.3f}"
            lines.append(
                f"| {r.variant} | {r.precision} | {r.file_bytes / 1e6:.1f} | {r.median_ms:.2f} "
                f"| {r.p90_ms:.2f} | {r.cpu_ms:.2f} | x{ref.median_ms / max(r.median_ms, 1e-9):.2f}"
                f" / x{ref.cpu_ms / max(r.cpu_ms, 1e-9):.2f} | {agree} |"
            )
        return "\n".join(lines)


def compare(
    repo: ModelRepository,
    name: str,
    variants: list[str],
    clip: Path,
    frames: int = 32,
    runs: int = 30,
    batch: int = 1,
    threads: int = 0,
    conf: float = 0.25,
    backend: str = "onnxruntime-cpu",
) -> BenchReport:
    """Load each variant, check agreement with the first, and time them interleaved.

    A variant may name its back end, `key@backend` (e.g. `primary@onnxruntime-cuda`,
    `trt-fp16@tensorrt`); otherwise `backend` runs it.

    With threads=1 the CPU time per run is the compute cost itself, which other processes
    on a shared machine inflate far less than the wall time.
    """
    loaded: list[LoadedModel] = []
    labels: list[str] = []
    for spec in variants:
        # "variant@backend" runs that variant on another back end (e.g. trt-fp16@tensorrt).
        key, _, on = spec.partition("@")
        on = on or backend
        options = {"threads": threads} if on.startswith("onnxruntime-cpu") else {}
        loaded.append(repo.open(name, backend=on, variant=key, **options))
        labels.append(spec if "@" in spec else loaded[-1].variant)
    try:
        manifest = loaded[0].manifest
        x = prepare(manifest.input, read_frames(clip, frames, 0.5))
        outs = [_run_all(m, x, batch) for m in loaded]
        probe = x[:batch]
        for m in loaded:  # warm-up
            m.runner.run(probe)
            m.runner.run(probe)
        times: list[list[float]] = [[] for _ in loaded]
        cpu: list[list[float]] = [[] for _ in loaded]
        for _ in range(runs):
            for i, m in enumerate(loaded):
                c0, t0 = time.process_time(), time.perf_counter()
                m.runner.run(probe)
                times[i].append((time.perf_counter() - t0) * 1e3)
                cpu[i].append((time.process_time() - c0) * 1e3)
        results = []
        for i, m in enumerate(loaded):
            t = sorted(times[i])
            agree = None if i == 0 else agreement(manifest, outs[0], outs[i], conf)
            results.append(
                VariantResult(
                    variant=labels[i],
                    precision=_precision(m),
                    file_bytes=m.path.stat().st_size,
                    median_ms=statistics.median(t),
                    p90_ms=t[min(len(t) - 1, round(0.9 * (len(t) - 1)))],
                    cpu_ms=statistics.median(cpu[i]),
                    agreement=agree,
                )
            )
    finally:
        for m in loaded:
            m.close()
    return BenchReport(name, batch, runs, len(x), cpu_line(), results)


def _precision(m: LoadedModel) -> str:
    v = m.manifest.variants.get(m.variant)
    return v.precision if v is not None else m.manifest.precision


def _run_all(m: LoadedModel, x: np.ndarray, batch: int) -> np.ndarray:
    outs = [m.runner.run(x[i : i + batch])[0] for i in range(0, len(x), batch)]
    return np.concatenate(outs, axis=0)
