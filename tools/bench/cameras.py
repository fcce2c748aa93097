"""Cameras per core: the figure users size a camera host by (issue 25).

    strata bench cameras --json out/cameras.json [--quick]

Two measurements, each against bare PyAV decoding in the same run:

1. Throughput: one agent (default config: motion gate, relevance gate, cascade) over a
   clip read as fast as it decodes, against decode only of the same clip; runs alternate
   so that other load hits both alike, medians compared (`agent_vs_decode`).
2. Cameras: N cameras of one clip, each played at its frame rate as a camera delivers it
   (`source.realtime`), in one agent; the most N with no camera falling behind its
   schedule by more than `max_lag_s` (a live camera would drop those frames for
   lateness), against the most N that bare decoding carries on the same cores: N threads
   running the device's own source (PyAV decode, the same pacing, nothing after it).
   Found by doubling, then bisection (`most_cameras`), per resolution and rate. A camera's
   lag is its worst over every frame; a trial where the agent gave up on any frame
   (overload, spool, ...) is not carried either.

The sink acks like an edge node and, like one, announces its detector's input (the edge's
default detector, `--edge-input`): the default agent scales its payloads to fit it. It runs
in a process of its own (`sink_process.py`): on the same cores, but its CPU time and its
GIL are not the agent's, as an edge node on its own host.

The clips are made from data/vtest.mp4 (H.264, libx264 with B-frames, re-timed to the
rate). Figures need an idle machine: never report a run made while other work ran.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.camera import CameraState
from strata.device.capture.sources import AvSource, configure_decoder
from strata.device.metrics import frames_handled
from strata.device.workers import AgentWorkers, worker_count
from strata.shared.config.common import LoggingConfig
from strata.shared.config.device import CameraConfig, DeviceConfig, SourceConfig
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_model
from strata.tools.bench.device import add_stand_in_arguments, stand_in_of
from strata.tools.bench.sink_process import SILENT, SinkProcess, StandInEdge

log = logging.getLogger("strata.tools.bench.cameras")

ROOT = Path(__file__).resolve().parents[2]
VTEST = ROOT / "data" / "vtest.mp4"
# Resolution (w, h) and frame rate of the clips the cameras search runs.
GRID = (((1280, 720), 10), ((1280, 720), 25), ((1920, 1080), 10), ((1920, 1080), 25))


@dataclass(frozen=True, slots=True)
class Trial:
    """N cameras for one clip: carried when no camera lagged more than the bound."""

    cameras: int
    carried: bool
    max_lag_s: float
    frames: int
    seconds: float
    load_avg_1m: float
    # Frames the agent gave up on (overload, spool, ...): any fails the trial.
    given_up: int = 0


@dataclass(frozen=True, slots=True)
class Search:
    """The most cameras one side carries for one clip, and every trial that found it."""

    clip: str
    width: int
    height: int
    fps: int
    most: int
    trials: list[Trial]


def parse_grid(text: str) -> tuple[tuple[tuple[int, int], int], ...]:
    """`1920x1080@25,1280x720@10` as ((w, h), fps) pairs; ValueError saying what is wrong."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            size, fps = part.split("@")
            w, h = size.lower().split("x")
            out.append(((int(w), int(h)), int(fps)))
        except ValueError:
            raise ValueError(f"--grid: {part!r} is not WIDTHxHEIGHT@FPS") from None
    return tuple(out)


def make_clip(out: Path, size: tuple[int, int], fps: int, frames: int, src: Path = VTEST) -> Path:
    """`frames` frames of `src` scaled to `size`, re-timed to `fps`, as H.264 (libx264,
    veryfast, B-frames: what a camera's encoder gives); reused when it exists."""
    import av
    from av.video.frame import PictureType

    if out.exists():
        return out
    tmp = out.with_suffix(".part.mp4")
    with av.open(str(src)) as inp, av.open(str(tmp), "w") as dst:
        stream = dst.add_stream("libx264", rate=fps, options={"preset": "veryfast", "crf": "23"})
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        n = 0
        while n < frames:  # a clip longer than the source loops over it
            inp.seek(0)
            for frame in inp.decode(video=0):
                if n == frames:
                    break
                scaled = frame.reformat(width=size[0], height=size[1], format="yuv420p")
                scaled.pts, scaled.time_base = n, Fraction(1, fps)
                scaled.pict_type = PictureType.NONE  # the encoder picks I/P/B, not the source
                dst.mux(stream.encode(scaled))
                n += 1
        dst.mux(stream.encode(None))
    tmp.rename(out)
    return out


def decode_only(clip: Path, cfg: SourceConfig) -> tuple[int, float]:
    """Bare PyAV decoding as fast as it goes, the agent's decoder threading: (frames, s)."""
    import av

    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        configure_decoder(stream, cfg)
        n, t = 0, time.perf_counter()
        for _ in container.decode(stream):
            n += 1
        return n, time.perf_counter() - t


def _device_config(clip: Path, cameras: int, realtime: bool) -> DeviceConfig:
    # Default sections but the source pacing: what users run.
    return DeviceConfig(
        agent_id="bench-cameras",
        edge=f"tcp://127.0.0.1:{free_port()}",
        source=SourceConfig(realtime=realtime),
        cameras=[CameraConfig(id=f"cam{i}", source=str(clip)) for i in range(cameras)],
    )


def agent_fps(clip: Path, models_repository: str = "", stand_in: StandInEdge = SILENT) -> float:
    """Frames per second one agent (default config) decodes and handles on `clip`, to a
    sink that tells it what `stand_in` says, as an edge does."""
    cfg = _device_config(clip, 1, realtime=False)
    with SinkProcess(cfg.edge, stand_in):
        agent = Agent(cfg, models_repository, registry=CollectorRegistry())
        t = time.perf_counter()
        if agent.run_until_done(timeout=600) != 0:
            raise RuntimeError(f"agent failed on {clip}: {agent.statuses()}")
        seconds = time.perf_counter() - t
    return frames_handled(agent.metrics.registry, "cam0") / seconds


def agent_vs_decode(
    clip: Path, repeats: int, models_repository: str = "", stand_in: StandInEdge = SILENT
) -> dict[str, Any]:
    """Figure 1: the agent against decode only on the same clip, alternating runs."""
    agent_fps(clip, models_repository, stand_in)  # warm-up: model load, page cache
    dec: list[float] = []
    agent: list[float] = []
    for _ in range(repeats):
        n, s = decode_only(clip, SourceConfig())
        dec.append(n / s)
        agent.append(agent_fps(clip, models_repository, stand_in))
    d, a = statistics.median(dec), statistics.median(agent)
    return {
        "clip": str(clip),
        "decode_fps": d,
        "agent_fps": a,
        "ratio": a / d,
        "decode_fps_runs": dec,
        "agent_fps_runs": agent,
    }


class _Lag:
    """The largest lag a source reported (its events; decoder kind and skips ignored)."""

    def __init__(self) -> None:
        self.most = 0.0
        self.frames = 0

    def decoder(self, kind: str) -> None:
        pass

    def skipped(self, reason: str, frames: int) -> None:
        pass

    def lag(self, seconds: float) -> None:
        self.most = max(self.most, seconds)
        self.frames += 1


def bare_trial(clip: Path, cameras: int, max_lag_s: float) -> Trial:
    """N threads, each the device's source over `clip` at its frame rate, nothing after."""
    lags = [_Lag() for _ in range(cameras)]
    cfg = SourceConfig(realtime=True)

    def play(lag: _Lag) -> None:
        src = AvSource(str(clip), cfg, events=lag)
        try:
            for _ in src.frames():
                pass
        finally:
            src.close()

    threads = [threading.Thread(target=play, args=(lag,), daemon=True) for lag in lags]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    worst = max(lag.most for lag in lags)
    return Trial(
        cameras,
        worst <= max_lag_s,
        worst,
        sum(lag.frames for lag in lags),
        time.perf_counter() - t,
        os.getloadavg()[0],
    )


def _total(registry: CollectorRegistry, counter: str, reason: str = "") -> float:
    """A counter summed over its labels (one registry scan: with a hundred cameras, one
    scan per camera and field took minutes); with `reason`, that reason's only."""
    return float(
        sum(
            s.value
            for metric in registry.collect()
            if metric.name == counter
            for s in metric.samples
            if s.name == f"{counter}_total" and (not reason or s.labels.get("reason") == reason)
        )
    )


@dataclass(frozen=True, slots=True)
class AgentSide:
    """The agent the cameras searches run: its models, the edge it sends to, its processes."""

    models_repository: str = ""
    stand_in: StandInEdge = SILENT
    processes: int = 0


def agent_trial(clip: Path, cameras: int, max_lag_s: float, side: AgentSide = AgentSide()) -> Trial:
    """N cameras of `clip` at its frame rate in one agent (default config but
    `device.processes`), to an acking sink. Carried when no camera delivered a frame more
    than `max_lag_s` late (each camera's worst lag, every frame: not a sample of the gauge)
    and the agent gave up on no frame (overload, spool, any reason)."""
    cfg = _device_config(clip, cameras, realtime=True)
    cfg = cfg.model_copy(update={"processes": side.processes})
    with SinkProcess(cfg.edge, side.stand_in):
        agent: Agent | AgentWorkers = (
            AgentWorkers(cfg, side.models_repository, LoggingConfig(level="WARNING"))
            if worker_count(cfg) > 1
            else Agent(cfg, side.models_repository, registry=CollectorRegistry())
        )
        t = time.perf_counter()
        agent.start()
        # Cheap waiting: the bench shares the cores it measures (a registry scan per
        # camera every few ms would cost the agent what it is measured on).
        while not agent.cameras_done():
            time.sleep(0.25)
        agent.stop()
        seconds = time.perf_counter() - t
    failed = [s for s in agent.statuses() if s.state is CameraState.FAILED]
    if failed:
        raise RuntimeError(f"agent failed on {clip}: {failed}")
    worst = agent.worst_lag_s()
    registry = agent.registry
    # Frames decided on: decoded, and held back undecoded (source.skip_held).
    frames = int(
        _total(registry, "strata_device_frames_decoded")
        + _total(registry, "strata_device_source_skipped", "held")
    )
    given_up = int(
        _total(registry, "strata_device_frames_dropped_overload")
        + _total(registry, "strata_device_frames_dropped")  # spool, shed, ...
    )
    if given_up:
        log.warning("%d camera(s): the agent gave up on %d frame(s)", cameras, given_up)
    carried = worst <= max_lag_s and given_up == 0
    return Trial(cameras, carried, worst, frames, seconds, os.getloadavg()[0], given_up)


def most_cameras(trial: Callable[[int], Trial], limit: int) -> tuple[int, list[Trial]]:
    """The most N (at most `limit`) that `trial(N)` carries: doubling, then bisection.
    Assumes more cameras never lag less (monotonic); 0 when one camera is not carried."""
    trials: list[Trial] = []

    def carried(n: int) -> bool:
        trials.append(trial(n))
        return trials[-1].carried

    good, n = 0, 1
    while n <= limit and carried(n):
        good, n = n, n * 2
    bad = min(n, limit + 1)
    while bad - good > 1:
        mid = (good + bad) // 2
        if carried(mid):
            good = mid
        else:
            bad = mid
    return good, trials


def cameras_per_core(
    clip: Path,
    fps: int,
    max_lag_s: float,
    limit: int,
    side: AgentSide = AgentSide(),
) -> dict[str, Any]:
    """Figure 2 for one clip: the most cameras bare decoding and the agent carry."""
    import av

    with av.open(str(clip)) as c:
        w, h = c.streams.video[0].width, c.streams.video[0].height
    cores = os.cpu_count() or 1
    bare_n, bare_t = most_cameras(lambda n: bare_trial(clip, n, max_lag_s), limit)
    agent_n, agent_t = most_cameras(lambda n: agent_trial(clip, n, max_lag_s, side), max(bare_n, 1))
    return {
        "bare": asdict(Search(clip.name, w, h, fps, bare_n, bare_t)),
        "agent": asdict(Search(clip.name, w, h, fps, agent_n, agent_t)),
        "cores": cores,
        "processes": side.processes,
        "bare_cameras_per_core": bare_n / cores,
        "agent_cameras_per_core": agent_n / cores,
        "ratio": agent_n / bare_n if bare_n else 0.0,
        # Bare decoding carried the most tried: its count (and so the ratio's base) is a
        # lower bound; run again with a higher --limit.
        "bare_at_limit": bare_n >= limit,
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench cameras`'s options."""
    p.add_argument("--clip", type=Path, default=VTEST, help="H.264 clip for figure 1")
    p.add_argument("--seconds", type=float, default=20.0, help="playback per cameras trial")
    p.add_argument("--max-lag", type=float, default=1.0, help="lag that counts as dropped (s)")
    p.add_argument("--limit", type=int, default=128, help="most cameras tried")
    p.add_argument("--repeats", type=int, default=3, help="alternating runs of figure 1")
    p.add_argument("--models-repository", default="", help="model repository (default: starter)")
    p.add_argument(
        "--processes",
        type=int,
        default=0,
        help="the agent's device.processes in the cameras searches (default 0: auto, the "
        "agent's default)",
    )
    add_stand_in_arguments(p)
    p.add_argument(
        "--grid",
        default="",
        help="clips to search, e.g. 1920x1080@25,1280x720@10 (default: 720p and 1080p at "
        "10 and 25 fps)",
    )
    p.add_argument("--work", type=Path, help="where the clips are made (default: a temp dir)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument(
        "--quick", action="store_true", help="1 repeat, 2 s trials, 720p 10 fps only, limit 4"
    )


def run(args: argparse.Namespace) -> int:
    """Both figures; 2 when there is no clip."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.clip.exists():
        print(f"bench: {args.clip} missing; run `python .ci/test_data.py`", file=sys.stderr)
        return 2
    grid: tuple[tuple[tuple[int, int], int], ...] = GRID
    if args.grid:
        try:
            grid = parse_grid(args.grid)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
    if args.quick:
        args.repeats, args.seconds, args.limit = 1, 2.0, 4
        grid = grid if args.grid else GRID[:1]
    repo = args.models_repository
    stand_in = stand_in_of(args)
    work = args.work or Path(tempfile.mkdtemp(prefix="strata-cameras-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "load_avg_1m_at_start": os.getloadavg()[0],
        },
        "max_lag_s": args.max_lag,
        "seconds": args.seconds,
        "command": getattr(args, "command_line", "strata bench cameras"),
        "edge_input": stand_in.model_input,
        "edge_gap": stand_in.gap,
    }
    result["throughput"] = agent_vs_decode(args.clip, args.repeats, repo, stand_in)
    print(
        f"agent {result['throughput']['agent_fps']:.1f} fps, decode only "
        f"{result['throughput']['decode_fps']:.1f}: ratio {result['throughput']['ratio']:.2f}"
    )
    result["cameras"] = []
    side = AgentSide(repo, stand_in, args.processes)
    for (w, h), fps in grid:
        clip = make_clip(work / f"vtest-{w}x{h}-{fps}.mp4", (w, h), fps, round(args.seconds * fps))
        r = cameras_per_core(clip, fps, args.max_lag, args.limit, side)
        result["cameras"].append(r)
        print(
            f"{w}x{h} {fps} fps: agent {r['agent']['most']} cameras, bare decoding "
            f"{r['bare']['most']} ({r['agent_cameras_per_core']:.2f} against "
            f"{r['bare_cameras_per_core']:.2f} per core): ratio {r['ratio']:.2f}"
            + (
                " (bare decoding reached --limit: its count is a lower bound)"
                if r["bare_at_limit"]
                else ""
            )
        )
    result["machine"]["load_avg_1m_at_end"] = os.getloadavg()[0]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0
