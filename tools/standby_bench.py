"""Standby against cold start: `python -m strata.tools.standby_bench`.

Each measurement runs in a fresh process (so memory is that process's alone), with the
imports done before the clock starts:

    cold     build the session, allocate batch buffers, run the first batch: the time
             from nothing to serving, and the resident memory of a live copy
    standby  build the session only (StandbyModel): the memory a standby holds; then
             take_over(): buffers and the first batch, the time a take-over costs

Memory is the process's resident set (VmRSS) above what it held after the imports.
Rounds alternate cold and standby, so other load on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from strata.shared.cli.parser import Parser


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _child(mode: str, model: str, batch: int, threads: int) -> dict[str, float]:
    """One measurement in this (fresh) process."""
    from strata.edge.standby import StandbyModel
    from strata.shared.config.edge import EdgeConfig
    from strata.shared.runtime import create_runner  # noqa: F401  (imports before the clock)
    from strata.shared.runtime.staging import HostStagedRunner  # noqa: F401

    cfg = EdgeConfig.model_validate({"runtime": {"threads": threads}})
    base = _rss_mib()
    t0 = time.perf_counter()
    standby = StandbyModel(model, cfg)
    built = time.perf_counter()
    held = _rss_mib() - base
    t1 = time.perf_counter()
    staged = standby.take_over(batch)
    served = time.perf_counter()
    live = _rss_mib() - base
    # A second batch: what one batch costs once warm (the inference both paths must do).
    t2 = time.perf_counter()
    slot = staged.acquire()
    staged.launch(slot, batch)
    staged.wait(slot, batch)
    batch_s = time.perf_counter() - t2
    staged.close()
    if mode == "cold":
        return {"ready_s": served - t0, "live_mib": live, "batch_s": batch_s}
    return {
        "build_s": built - t0,
        "standby_mib": held,
        "take_over_s": served - t1,
        "live_mib": live,
        "batch_s": batch_s,
    }


@dataclass(frozen=True, slots=True)
class Report:
    """Medians over the rounds."""

    model: str
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
    take_over_ratio: float
    memory_ratio: float
    loadavg: str


def measure(model: str, batch: int, threads: int, rounds: int) -> Report:
    """Alternate cold and standby processes; medians."""
    runs: dict[str, list[dict[str, float]]] = {"cold": [], "standby": []}
    for _ in range(rounds):
        for mode in ("cold", "standby"):
            out = subprocess.run(
                [sys.executable, "-m", "strata.tools.standby_bench", "--child", mode,
                 "--model", model, "--batch", str(batch), "--threads", str(threads)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(mode: str, key: str) -> float:
        return float(np.median([r[key] for r in runs[mode]]))

    cold, take = med("cold", "ready_s"), med("standby", "take_over_s")
    held, live = med("standby", "standby_mib"), med("cold", "live_mib")
    return Report(
        model=model,
        batch=batch,
        rounds=rounds,
        cold_start_s=cold,
        standby_build_s=med("standby", "build_s"),
        take_over_s=take,
        warm_batch_s=med("cold", "batch_s"),
        cold_overhead_s=cold - med("cold", "batch_s"),
        take_over_overhead_s=take - med("standby", "batch_s"),
        standby_mib=held,
        live_mib=live,
        take_over_ratio=take / cold if cold else 0.0,
        memory_ratio=held / live if live else 0.0,
        loadavg=Path("/proc/loadavg").read_text().split(" ")[0],
    )


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m strata.tools.standby_bench", description=__doc__)
    p.add_argument("--model", default="", help="ONNX file (default: starter yolov8n)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default="")
    p.add_argument("--child", choices=["cold", "standby"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    model = args.model
    if not model:
        from strata.shared.models import ModelRepository

        model = str(ModelRepository().file_of("yolov8n")[2])
    if args.child:
        print(json.dumps(_child(args.child, model, args.batch, args.threads)))
        return 0
    report = measure(model, args.batch, args.threads, args.rounds)
    print(json.dumps(asdict(report), indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(report), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
