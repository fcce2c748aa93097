"""The edge batcher's policies, rule against learned: `strata bench scheduler ACTION`.

    strata bench scheduler curve            # the batch-latency curve (ONNX Runtime CPU)
    strata bench scheduler compare --json out.json --q-table q.json   # simulated traces
    strata bench scheduler node --q-table q.json   # the real node, the same traces

`curve` and `compare` run the simulator (tools/bench/schedsim.py); `node` replays a trace
into the real edge node in this process (tools/bench/schednode.py).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from strata.shared.cli.parser import Parser
from strata.shared.config.edge import SchedulerConfig
from strata.shared.models import ModelRepository
from strata.tools.bench.schednode import run_node
from strata.tools.bench.schedsim import (
    MEASURED_CPU_CURVE,
    SimResult,
    SimSetup,
    compare,
    mean_over_seeds,
    measure_curve,
    table,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench scheduler`'s actions and their options."""
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=Parser)
    c = sub.add_parser("curve", help="measure the batch-latency curve (ONNX Runtime CPU)")
    c.add_argument("--model", default="", help="ONNX file (default: starter yolov8n)")
    c.add_argument("--batches", default="1,2,4,8")
    c.add_argument("--threads", type=int, default=0)
    c.add_argument("--rounds", type=int, default=5)
    m = sub.add_parser("compare", help="every policy on the same simulated traces")
    m.add_argument("--curve", default="", help="JSON {batch: seconds} (default: measured)")
    m.add_argument("--duration", type=float, default=300.0, help="seconds per trace")
    m.add_argument("--train", type=float, default=10800.0, help="seconds of training traces")
    m.add_argument("--cameras", type=int, default=4)
    m.add_argument("--base-fps", type=float, default=0.5, help="per camera")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--seeds", type=int, default=1, help="repeat over this many seeds; means")
    m.add_argument("--decide-every", type=float, default=2.0, help="seconds per decision")
    m.add_argument(
        "--deadline-shed",
        action="store_true",
        help="every policy sheds, before a batch, the frames it would finish past the SLA",
    )
    m.add_argument("--q-table", default="", help="save the trained table here")
    m.add_argument("--json", default="", help="write the results here")
    n = sub.add_parser("node", help="the real edge node on the CPU against the same traces")
    n.add_argument("--policy", choices=["rule", "learned"], action="append")
    n.add_argument("--q-table", default="", help="warm start of the learned policy")
    n.add_argument("--kind", default="burst10x", help="trace kind")
    n.add_argument("--duration", type=float, default=90.0)
    n.add_argument("--cameras", type=int, default=4)
    n.add_argument("--base-fps", type=float, default=0.5)
    n.add_argument("--seed", type=int, default=1)
    n.add_argument("--rounds", type=int, default=1, help="alternating rounds per policy")
    n.add_argument("--deadline-shed", action="store_true", help="overload.deadline.enabled on")
    n.add_argument("--json", default="")


def run(args: argparse.Namespace) -> int:
    """The chosen action."""
    actions = {"curve": run_curve, "compare": run_compare, "node": run_node}
    return actions[args.action](args)


def run_curve(args: argparse.Namespace) -> int:
    """`curve`: seconds per batch of each size, printed as JSON."""
    model = Path(args.model) if args.model else ModelRepository().file_of("yolov8n")[2]
    curve = measure_curve(
        model, [int(b) for b in args.batches.split(",")], args.threads, args.rounds
    )
    print(json.dumps({str(k): round(v, 4) for k, v in curve.items()}))
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """`compare`: every policy on the same simulated traces, a table on stdout."""
    curve = (
        {int(k): float(v) for k, v in json.loads(Path(args.curve).read_text()).items()}
        if args.curve
        else MEASURED_CPU_CURVE
    )
    results: list[SimResult] = []
    for k in range(args.seeds):
        setup = SimSetup(
            cameras=args.cameras,
            base_fps=args.base_fps,
            duration_s=args.duration,
            train_s=args.train,
            seed=args.seed + 100 * k,
            deadline_s=SchedulerConfig().sla_ms / 1e3 if args.deadline_shed else 0.0,
        )
        # The first seed's trained table is the one saved (the node's warm start).
        q = args.q_table if k == 0 else ""
        results += compare(
            setup,
            SchedulerConfig(policy="learned", decide_every_s=args.decide_every),
            curve,
            q_table=q,
        )
    print(table(mean_over_seeds(results) if args.seeds > 1 else results))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0
