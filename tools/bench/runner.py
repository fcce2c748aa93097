"""The bench's steps in order: machine, tier benchmarks, cascade, side by side, report."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.shared import machine
from strata.shared.config.edge import DEFAULT_DETECTOR
from strata.tools.bench import plots, report
from strata.tools.bench.accuracy import CascadeOptions, run_cascade
from strata.tools.bench.cascade import NO_SHEDDING, ClipResult
from strata.tools.bench.clip_args import CLIPS
from strata.tools.bench.cost import bench_cost, clip_fps
from strata.tools.bench.detector import resolve
from strata.tools.bench.progress import say
from strata.tools.bench.side_by_side import strata_batch, ultralytics_side_by_side
from strata.tools.bench.tiers import TIERS, TierRun, lookup, run_tier

log = logging.getLogger(__name__)


@dataclass
class BenchOptions:
    """What `strata bench` was asked to do."""

    out: Path
    quick: bool = False
    skip: set[str] = field(default_factory=set)
    vtest: Path | None = None
    tier_timeout_s: float | None = None
    command: str = "strata bench"
    ultralytics_python: str = sys.executable
    # The cascade's clips (tools/bench/clip_args.py), their length (0: whole) and the
    # edge's detector (model repository, "": the starter one; model name).
    clips: tuple[str, ...] = CLIPS
    frames: int = 0
    model_repository: str = ""
    model: str = DEFAULT_DETECTOR
    encoding: str = "jpeg"


def run_tiers(opts: BenchOptions, logs: Path) -> dict[str, TierRun]:
    """Each tier's benchmark, one after another (they would compete for the cores)."""
    timeout = opts.tier_timeout_s or (60.0 if opts.quick else 900.0)
    runs: dict[str, TierRun] = {}
    for tier in TIERS:
        if tier in opts.skip:
            continue
        say(f"{tier} benchmark ...")
        run = run_tier(tier, logs, opts.quick, timeout)
        runs[tier] = run
        if run.error:
            say(f"{tier} benchmark failed: {run.error}")
        else:
            say(f"{tier} benchmark done in {run.seconds:.0f}s")
    return runs


def plot_data(runs: dict[str, TierRun], clips: list[ClipResult]) -> plots.PlotData:
    """Series for the plots from whatever the benchmarks measured."""
    data = plots.PlotData()
    for c in clips:
        data.latency_ms[f"capture to edge result, {c.clip} (pipeline)"] = c.edge_latency_ms
    for tier in ("edge", "cloud"):
        run = runs.get(tier)
        samples = lookup(run.data, "latencies_ms") if run else None
        if isinstance(samples, list):
            data.latency_ms[f"{tier} benchmark"] = samples
    edge = runs.get("edge")
    sweep = lookup(edge.data, "sweep") if edge else None
    if isinstance(sweep, list):
        data.throughput["edge node"] = [
            (float(p["batch"]), float(p["node_fps"])) for p in sweep if "node_fps" in p
        ]
        data.throughput["bare ONNX Runtime"] = [
            (float(p["batch"]), float(p["bare_fps"])) for p in sweep if "bare_fps" in p
        ]
    cloud = runs.get("cloud")
    points = lookup(cloud.data, "sweep") if cloud else None
    if isinstance(points, list):
        data.throughput["cloud Classify (x: batch the batcher formed)"] = [
            (float(p["mean_batch"]), float(p["served_ips"]))
            for p in points
            if "mean_batch" in p and "served_ips" in p
        ]
    for c in clips:
        if c.curve:
            name = c.clip
            data.f1_vs_kept[f"uniform sampling + the edge's tracker, {name}"] = [
                (p.kept, p.f1) for p in c.curve
            ]
            data.f1_vs_kept[f"cascade, {name}"] = [
                (c.frames_to_edge / max(c.frames_total, 1), c.vs_reference.f1)
            ]
            data.bytes_vs_kept[f"H.264 of the kept frames at 320, {name}"] = c.bytes_curve
            data.bytes_vs_kept[f"cascade, {name}"] = [
                (
                    c.frames_to_edge / max(c.frames_total, 1),
                    c.bytes_to_edge / max(c.bytes_source, 1),
                )
            ]
    device = runs.get("device")
    motion = lookup(device.data, "motion_sweep") if device else None
    if isinstance(motion, list):
        by_clip: dict[str, list[tuple[float, float]]] = {}
        for p in motion:
            by_clip.setdefault(str(p.get("clip", "clip")), []).append(
                (float(p["threshold"]), float(p["kept_fraction"]))
            )
        data.kept.update(by_clip)
    return data


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    """Everything, in order; writes report.json, report.md and plots; returns the report."""
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    started = time.monotonic()
    info = machine.describe()
    say(f"machine: {machine.one_line(info)}")
    # Resolved first: a wrong name or a corrupt file fails before an hour of benchmarks.
    detector = resolve(opts.model_repository, opts.model)
    runs = run_tiers(opts, logs)
    clips: list[ClipResult] = []
    extra: dict[str, Any] = {"detector": detector.describe(), "encoding": opts.encoding}
    if "cascade" not in opts.skip:
        cascade = CascadeOptions(
            quick=opts.quick,
            vtest=opts.vtest,
            skip_vtest="vtest" in opts.skip,
            clips=opts.clips,
            frames=opts.frames,
            detector=detector,
            encoding=opts.encoding,
        )
        try:
            clips = run_cascade(out / "cascade", cascade)
        except Exception as exc:  # the report still gets written, with the failure in it
            say(f"cascade failed: {exc}")
            extra["cascade_error"] = str(exc)
    if "ultralytics" not in opts.skip and clips:
        strata_fps = clips[0].reference_fps or None
        try:
            side = ultralytics_side_by_side(
                out / "cascade" / "synthetic.mp4",
                strata_fps,
                opts.ultralytics_python,
                strata_batch(NO_SHEDDING),
            )
        except Exception as exc:
            side = {"error": str(exc)}
        if side is None:
            say(
                f"ultralytics is not installed for {opts.ultralytics_python} (the export extra; "
                "--ultralytics-python names another interpreter); side by side skipped"
            )
        extra["ultralytics"] = side
    if clips:
        paths = {"synthetic.mp4": out / "cascade" / "synthetic.mp4"}
        if opts.vtest is not None:
            paths[opts.vtest.name] = opts.vtest
        rates = {name: clip_fps(p) for name, p in paths.items() if p.is_file()}
        extra["cost"] = bench_cost(runs, clips, rates)
    written, notes = plots.write_all(plot_data(runs, clips), out)
    for note in notes:
        say(note)
    extra["plots"] = [p.name for p in written]
    extra["seconds"] = round(time.monotonic() - started, 1)
    rep = report.build(info, runs, clips, extra, opts.quick)
    report.write_json(rep, out / "report.json")
    (out / "report.md").write_text(report.markdown(rep, clips, opts.command))
    say(
        f"wrote {out / 'report.json'}, {out / 'report.md'} and {len(written)} plots "
        f"in {extra['seconds']}s"
    )
    if rep["missing"]:
        say(f"missing keys: {', '.join(rep['missing'])}")
    return rep
