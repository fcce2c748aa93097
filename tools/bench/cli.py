"""`strata bench`: every tier's benchmark and the cascade's accuracy, in one report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `strata bench`."""
    p = subparsers.add_parser(
        "bench",
        help="run every benchmark and write report.json, report.md and plots",
        description=(
            "Run the device, edge and cloud benchmarks (each against its bare model or codec in "
            "the same run) and the cascade's accuracy check (the real daemons over loopback, "
            "gates off against gates on), and write report.json, report.md and PNG plots."
        ),
    )
    p.add_argument("--out", default="bench-out", metavar="DIR", help="output folder (bench-out)")
    p.add_argument("--quick", action="store_true", help="reduced sizes: under two minutes")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["device", "edge", "cloud", "cascade", "vtest", "ultralytics"],
        help="leave a part out (repeatable)",
    )
    p.add_argument(
        "--vtest", metavar="FILE", help="the real clip (default: data/vtest.mp4 when present)"
    )
    p.add_argument(
        "--tier-timeout", type=float, default=None, metavar="S", help="limit per tier benchmark"
    )
    p.add_argument(
        "--ultralytics-python",
        default=sys.executable,
        metavar="PYTHON",
        help="interpreter with the export extra for the ultralytics side by side (default: this)",
    )
    p.set_defaults(func=run)


def find_vtest(explicit: str | None) -> Path | None:
    """The real test clip, if it is here."""
    if explicit:
        return Path(explicit)
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        path = base / "data" / "vtest.mp4"
        if path.is_file():
            return path
    return None


def run(args: argparse.Namespace) -> int:
    """Run everything asked for; 0 when every report key has a number."""
    import signal

    from strata.tools.bench.runner import BenchOptions, run_bench

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM and SIGINT (even where a shell started the bench with SIGINT ignored) unwind
    # through the pipeline runs' cleanup, which stops the daemons they started.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)

    opts = BenchOptions(
        out=Path(args.out),
        quick=args.quick,
        skip=set(args.skip),
        vtest=find_vtest(args.vtest),
        tier_timeout_s=args.tier_timeout,
        command=" ".join(["strata", "bench", *sys.argv[2:]]),
        ultralytics_python=args.ultralytics_python,
    )
    report: dict[str, Any] = run_bench(opts)
    return 0 if not report["missing"] else 1
