"""Incremental loading: a standby model that takes over in a fraction of a cold start.

A `StandbyModel` has done the slow, memory-light part of loading: the file is read, the
checksum verified by the repository, the runtime session built and its graph optimised.
It has not allocated batch buffers nor run a batch, so it holds the weights and the
session and none of the per-batch memory (input buffers, the runtime's activation arena).
`take_over()` does the rest: the batch buffers and one warm-up batch, then hands a staged
runner to an `EdgeNode` (its `runner=` argument). `python -m strata.tools.standby_bench`
measures take-over time and memory held against a cold start (docs/benchmarks.md).

CPU back end only for now: the GPU runners allocate their pinned and device buffers when
they are built, so a GPU standby needs a runner that defers them (not done; see the
issue's report).
"""

from __future__ import annotations

import time
from pathlib import Path

from strata.shared.config.edge import EdgeConfig
from strata.shared.runtime import ModelLoadError, ModelRunner, create_runner
from strata.shared.runtime.staging import HostStagedRunner, StagedRunner

from .detector import CPU_BACKENDS


class StandbyModel:
    """A built session without batch buffers (see the module docstring)."""

    def __init__(self, path: str | Path, cfg: EdgeConfig) -> None:
        rt = cfg.runtime
        if rt.backend not in CPU_BACKENDS:
            raise ModelLoadError(f"a standby model needs a CPU back end, not {rt.backend}")
        self.path = Path(path)
        self.cfg = cfg
        t0 = time.perf_counter()
        self.runner: ModelRunner = create_runner(self.path, rt.backend, threads=rt.threads)
        self.build_s = time.perf_counter() - t0

    def take_over(self, max_batch: int) -> StagedRunner:
        """Allocate the batch buffers and run one full batch (the warm-up a cold start does
        too); returns the staged runner an EdgeNode serves with."""
        shape = self.runner.inputs[0].shape
        size = self.cfg.model.input_size
        chw = (int(shape[1] or 3), int(shape[2] or size), int(shape[3] or size))
        staged = HostStagedRunner(self.runner, max_batch, chw, slots=1)
        slot = staged.acquire()
        staged.launch(slot, staged.max_batch)
        staged.wait(slot, staged.max_batch)
        return staged
