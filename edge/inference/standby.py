"""Incremental loading: a standby model that takes over in a fraction of a cold start.

A `StandbyModel` has done the slow, memory-light part of loading: the file is read, the
checksum verified by the repository, and the engine or session built (ONNX Runtime CPU:
the session, its graph optimised; TensorRT: the engine deserialized, or built once and
cached, and one execution context per stream; torch-cuda: the module on the device; ORT
CUDA/TensorRT: one session per stream). It holds no batch buffers (no pinned host or
device I/O buffer, no slot) and has run no batch. `take_over()` does the rest: the staged
runner's `allocate()` and one warm-up batch per slot, then hands the runner to an
`EdgeNode` (its `runner=` argument). Both paths are the same staged runners a cold start
opens (`open_staged`), built with `allocate=False`.

`strata bench standby` measures take-over time and memory held against a
cold start (docs/benchmarks.md). What a GPU standby still holds beside the weights: a
TensorRT execution context's activation memory (allocated with the context) and ONNX
Runtime's CUDA arena from the probe run that sizes the outputs.
"""

from __future__ import annotations

import time
from pathlib import Path

from strata.edge.inference.detector import open_staged
from strata.shared.config.edge import EdgeConfig
from strata.shared.runtime.staging import StagedRunner


class StandbyModel:
    """A built engine or session without batch buffers (see the module docstring)."""

    def __init__(self, path: str | Path, cfg: EdgeConfig, max_batch: int | None = None) -> None:
        self.path = Path(path)
        self.cfg = cfg
        self.max_batch = max_batch or cfg.batching.max_batch
        t0 = time.perf_counter()
        self.runner: StagedRunner = open_staged(self.path, cfg, self.max_batch, allocate=False)
        self.build_s = time.perf_counter() - t0

    def io_bytes(self) -> int:
        """Bytes of batch I/O buffers held: 0 until `take_over()`."""
        return self.runner.io_bytes()

    def take_over(self) -> StagedRunner:
        """Allocate the batch buffers and run one full batch on every slot (the warm-up a
        cold start's first batches do too); returns the staged runner to serve with."""
        runner = self.runner
        runner.allocate()
        n = int(runner.host_input(0).shape[0])
        for _ in range(runner.slots):
            slot = runner.acquire()
            runner.launch(slot, n)
            runner.wait(slot, n)
        return runner

    def close(self) -> None:
        """Release the engine or session (a standby that was not needed)."""
        self.runner.close()
