"""`strata demo`: the three tiers on loopback as separate processes, with live progress."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from strata.tools.clips import find_vtest

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `strata demo`."""
    p = subparsers.add_parser(
        "demo",
        help="run cloud, edge and device on this machine over a clip and report",
        description=(
            "Start the cloud, an edge node and a device agent on 127.0.0.1 as separate "
            "processes, feed them a clip (by default OpenCV's vtest.avi street camera, paced "
            "in real time, from data/vtest.mp4: `python .ci/test_data.py` fetches it; without "
            "it the built-in synthetic clip), show live progress per tier and camera, and "
            "write an annotated MP4 per source, summary.json, the event store and the "
            "daemons' logs to --out. Ctrl-C stops everything cleanly and still writes the "
            "report."
        ),
    )
    p.add_argument(
        "--source",
        action="append",
        metavar="FILE|URL",
        help="a video file or rtsp:// URL; repeat for several cameras (default: "
        "data/vtest.mp4 in real time, else the synthetic clip). Files are read as fast as "
        "they decode unless --realtime, so the edge is set to queue every kept frame rather "
        "than shed, and latencies are mostly that queueing",
    )
    p.add_argument(
        "--realtime",
        action="store_true",
        help="read files at their frame rate, like a camera (latencies as a camera sees them)",
    )
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="the built-in synthetic clip (moving shapes at 5 fps) instead of vtest",
    )
    p.add_argument("--out", default="demo-out", metavar="DIR", help="output folder (demo-out)")
    p.add_argument(
        "--frames",
        type=int,
        default=150,
        help="length of the synthetic clip in frames (150; with --synthetic)",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="stop after S seconds (live streams run until Ctrl-C otherwise)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value for the daemons, e.g. edge.batching.max_batch=8 (YAML value)",
    )
    p.add_argument("--startup-timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true", help="no live progress line")
    p.set_defaults(func=run)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`a.b.c=VALUE` pairs as a nested dict (values parsed as YAML scalars)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got {item!r}")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    return out


def default_sources(synthetic: bool) -> tuple[list[str], bool]:
    """(sources, realtime) when none are given: vtest in real time, else the synthetic clip
    (its own source string paces it) with a one-line reason."""
    if synthetic:
        return [], False
    vtest = find_vtest(None)
    if vtest is not None:
        return [str(vtest)], True
    print(
        "strata demo: data/vtest.mp4 not found (`python .ci/test_data.py` fetches it with "
        "apt-get; `make demo` tries), so the synthetic clip instead",
        file=sys.stderr,
    )
    return [], False


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when it finished, 130 on Ctrl-C, 1 when a daemon died."""
    from strata.shared.logs import setup_logging
    from strata.tools.demo.session import DemoOptions, DemoSession

    setup_logging("WARNING", name="demo")
    out = Path(args.out)
    try:
        overrides = parse_sets(args.set)
    except ValueError as exc:
        print(f"strata demo: {exc}", file=sys.stderr)
        return 2
    sources, realtime = list(args.source or []), args.realtime
    if not sources:
        sources, default_realtime = default_sources(args.synthetic)
        realtime = realtime or default_realtime
    opts = DemoOptions(
        out=out,
        sources=sources,
        synthetic_frames=args.frames,
        duration_s=args.duration,
        overrides=overrides,
        progress=not args.quiet,
        startup_timeout_s=args.startup_timeout,
        realtime=realtime,
    )
    return DemoSession(opts).run()
