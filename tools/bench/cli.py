"""`strata bench [PART]`: every benchmark of the project, one table of parts.

Plain `strata bench` runs the headline set (device, edge and cloud benchmarks, the cascade's
accuracy, the ultralytics side by side) and writes one report; `strata bench PART` runs one
part alone. A part is a module with `add_arguments(parser)` and `run(args) -> int`; it is
imported only when its part is chosen, so `strata --help` imports no benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.shared.cli.parser import Parser
from strata.tools.bench.clip_args import add_clip_arguments, clips_of
from strata.tools.clips import find_vtest


@dataclass(frozen=True, slots=True)
class Part:
    """One benchmark: the module that runs it and its line in `strata bench --help`."""

    module: str
    help: str


# part -> its module. The headline set (plain `strata bench`) runs device, edge, cloud and
# cascade; each of them also runs alone.
PARTS: dict[str, Part] = {
    "device": Part(
        "strata.tools.bench.device", "agent frames/s against bare PyAV decode; gate drops"
    ),
    "edge": Part("strata.tools.bench.edge", "edge node frames/s against the bare runtime"),
    "cloud": Part(
        "strata.tools.bench.cloud", "cloud Classify against the bare model, by concurrency"
    ),
    "cascade": Part(
        "strata.tools.bench.accuracy", "accuracy and bytes against the detector on every frame"
    ),
    "overload": Part("strata.tools.bench.overload", "edge goodput at 1x, 2x, 3x its capacity"),
    "outage": Part("strata.tools.bench.outage", "crops the uplink loses through a cloud outage"),
    "delivery": Part(
        "strata.tools.bench.delivery",
        "events to MQTT and a webhook through outages and a kill -9: lost, order, latency",
    ),
    "routing": Part(
        "strata.tools.bench.routing", "real edges: balance, a 4th joining, one kill -9"
    ),
    "scheduler": Part(
        "strata.tools.bench.scheduler", "batching policies: simulated traces, the real node"
    ),
    "standby": Part(
        "strata.tools.bench.standby", "standby take-over and memory against cold start"
    ),
    "store": Part("strata.tools.bench.store", "event-store writes/s: SQLite, PostgreSQL x1 and x2"),
    "console": Part(
        "strata.tools.bench.console", "web console server time over 100,000 stored events"
    ),
    "placement": Part("strata.tools.bench.placement", "where kept frames go at a fixed budget"),
    "hostile": Part("strata.tools.bench.hostile", "daemons under hostile input: memory, latency"),
    "rules": Part(
        "strata.tools.bench.rules", "lines, zones, dwell: cascade and uniform against every frame"
    ),
    "rules-policy": Part(
        "strata.tools.bench.rules_policy",
        "sampling policies replayed on a saved rules run: what the rules agree at a share",
    ),
    "identities": Part(
        "strata.tools.bench.identities",
        "id switches with appearance off and on, cross-camera links, on two cuts of vtest",
    ),
    "gate": Part(
        "strata.tools.bench.gate",
        "the site gate on nuisance motion (light, rain, foliage, a real tree): frames saved, cost",
    ),
    "cameras": Part(
        "strata.tools.bench.cameras", "cameras per core at their frame rate, against bare decode"
    ),
    "capacity": Part(
        "strata.tools.bench.capacity",
        "cameras per edge node with the real detector, cascade on and off, and a baseline",
    ),
    "identity-search": Part(
        "strata.tools.bench.identity_search",
        "search by example: SearchSimilar's p99 over 100,000 stored tracks",
    ),
}
HEADLINE = ("device", "edge", "cloud", "cascade")


class PartParser(Parser):
    """A part's parser: it takes its arguments from the part's module when the part is chosen.

    Every parse records, as `args.command_line`, the `strata bench PART ...` command that
    reproduces it (for the figures' JSON).
    """

    def __init__(self, *args: Any, part: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.part = part
        self.loaded = not part

    def load(self) -> None:
        """Import the part's module and add its arguments (once)."""
        if self.loaded:
            return
        module = importlib.import_module(PARTS[self.part].module)
        self.description = module.__doc__
        module.add_arguments(self)
        self.set_defaults(func=module.run)
        self.loaded = True

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.load()
        ns, rest = super().parse_known_args(args, namespace)
        if self.part:
            given = list(sys.argv[1:] if args is None else args)
            ns.command_line = shlex.join(["strata", "bench", self.part, *given])
        return ns, rest


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `strata bench` and its parts."""
    p = subparsers.add_parser(
        "bench",
        help="run the benchmarks (all headline ones, or one PART) and write their figures",
        description=(
            "Without PART: run the device, edge and cloud benchmarks (each against its bare "
            "model or codec in the same run) and the cascade's accuracy check (the real daemons "
            "over loopback, gates off against gates on), and write report.json, report.md and "
            "PNG plots. With PART: run that benchmark alone (`strata bench PART --help`)."
        ),
    )
    p.add_argument("--out", default="bench-out", metavar="DIR", help="output folder (bench-out)")
    p.add_argument("--quick", action="store_true", help="reduced sizes: under two minutes")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=[*HEADLINE, "vtest", "ultralytics"],
        help="leave a part of the headline set out (repeatable)",
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
    add_clip_arguments(p)
    p.set_defaults(func=run)
    parts = p.add_subparsers(
        dest="part", metavar="PART", required=False, parser_class=PartParser, title="parts"
    )
    for name, part in PARTS.items():
        parts.add_parser(
            name,
            part=name,
            help=part.help,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )


def run(args: argparse.Namespace) -> int:
    """The headline set; 0 when every report key has a number."""
    import signal

    from strata.shared.models import ModelError
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
        clips=clips_of(args.clip),
        frames=args.frames,
        model_repository=args.model_repository,
        model=args.model,
        encoding=args.encoding,
    )
    try:
        report: dict[str, Any] = run_bench(opts)
    except ModelError as exc:
        print(f"strata bench: the detector: {exc}", file=sys.stderr)
        return 2
    return 0 if not report["missing"] else 1
