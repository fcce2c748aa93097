"""Device agent benchmark: agent frames/s against bare PyAV decoding, in the same run.

    strata bench device --json out/device.json

1. Throughput on an H.264 clip (data/vtest.mp4, 768x576) read as fast as possible: the
   whole agent with both gates on, sending to a real ZeroMQ ROUTER that acks every frame
   in a process of its own (its CPU time is not the agent's: `sink_process.py`), against
   two bare PyAV baselines. The primary one decodes only (the
   physical limit of the agent's input: the agent converts to BGR only the frames the
   motion gate keeps); decode + BGR of every frame is reported beside it. Runs alternate
   (decode, decode + BGR, agent, ...) so that load from other processes hits all alike;
   the medians are compared.
2. What each gate drops, and the bytes sent against the clip's size, on vtest.avi and on
   the synthetic clip (written as an H.264 MP4 first, so it has a file size).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.capture.sources import configure_decoder
from strata.device.metrics import CameraCounts, frames_handled
from strata.shared.config.device import (
    CameraConfig,
    DeviceConfig,
    GateConfig,
    MotionConfig,
    PayloadConfig,
    SenderConfig,
    SourceConfig,
)
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_model
from strata.shared.synthetic import SyntheticClip
from strata.tools.bench.sink_process import SILENT, SinkProcess, StandInEdge

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class ClipReport:
    """One agent run over one clip."""

    clip: str
    frames: int
    seconds: float
    fps: float
    cpu_seconds: float
    # The stand-in edge's CPU time (its own process), reported apart from the agent's.
    sink_cpu_seconds: float
    dropped_motion: int
    dropped_gate: int
    sent: int
    acked: int
    bytes_sent: int
    bytes_source: int
    motion_drop_fraction: float
    gate_drop_fraction: float
    bytes_ratio: float


def decode_fps(path: Path, cfg: SourceConfig, bgr: bool = False) -> tuple[int, float, float]:
    """Bare PyAV: decode every frame (and convert it to BGR when `bgr`);
    (frames, seconds, CPU seconds)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        configure_decoder(stream, cfg)  # the decoder threading the agent's sources use
        n = 0
        t, cpu = time.perf_counter(), time.process_time()
        for frame in container.decode(stream):
            if bgr:
                frame.to_ndarray(format="bgr24")
            n += 1
        return n, time.perf_counter() - t, time.process_time() - cpu


def free_endpoint() -> str:
    """tcp://127.0.0.1:PORT on a port that was free a moment ago."""
    return f"tcp://127.0.0.1:{free_port()}"


def edge_model_input(repository: str = "") -> int:
    """The input side of the edge's default detector (what an edge node announces in its
    EdgeInfo, and a default agent scales its frames to fit); 0, said on stderr, when the
    repository has no such model."""
    from strata.shared.config.edge import EdgeModelConfig
    from strata.shared.models import ModelError, ModelRepository

    name = EdgeModelConfig().name
    try:
        manifest = ModelRepository(repository or None).manifest(name)
    except ModelError as exc:
        print(
            f"bench: no edge detector input to announce ({exc}): full-size payloads",
            file=sys.stderr,
        )
        return 0
    return max(manifest.input.width or 0, manifest.input.height or 0)


def run_agent(
    path: Path,
    base: DeviceConfig,
    models_repository: str = "",
    camera_id: str = "bench",
    stand_in: StandInEdge = SILENT,
) -> ClipReport:
    """The agent over one clip, to a real acking ROUTER that tells it what `stand_in` says
    as an edge does; timed from start to last ack."""
    edge = free_endpoint()
    cfg = DeviceConfig.model_validate(
        {
            **base.model_dump(),
            "edge": edge,
            "cameras": [CameraConfig(id=camera_id, source=str(path)).model_dump()],
        }
    )
    sink = SinkProcess(edge, stand_in)
    with sink:
        agent = Agent(cfg, models_repository, registry=CollectorRegistry())
        t, cpu = time.perf_counter(), time.process_time()
        rc = agent.run_until_done(timeout=600)
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    got = sink.report
    if rc != 0:
        raise RuntimeError(f"agent failed on {path}: {agent.statuses()}")
    c = CameraCounts.read(agent.metrics.registry, camera_id)
    frames = frames_handled(agent.metrics.registry, camera_id)
    passed_motion = c.decoded - c.dropped_motion
    size = path.stat().st_size
    if got.frames - got.duplicates != c.acked:
        raise RuntimeError(f"sink got {got.frames} frames, agent counted {c.acked} acks")
    return ClipReport(
        clip=str(path),
        frames=frames,
        seconds=seconds,
        fps=frames / seconds,
        cpu_seconds=cpu,
        sink_cpu_seconds=got.cpu_seconds,
        dropped_motion=c.dropped_motion,
        dropped_gate=c.dropped_gate,
        sent=c.sent,
        acked=c.acked,
        bytes_sent=c.bytes_sent,
        bytes_source=size,
        motion_drop_fraction=c.dropped_motion / frames if frames else 0.0,
        gate_drop_fraction=c.dropped_gate / passed_motion if passed_motion else 0.0,
        bytes_ratio=c.bytes_sent / size,
    )


def machine() -> dict[str, Any]:
    """CPU model and cores of this machine, and its load when the run started."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
    }


@dataclass(frozen=True, slots=True)
class Throughput:
    """Alternating runs of the two bare baselines and the agent over one clip."""

    frames: int
    decode_fps: list[float]
    decode_bgr_fps: list[float]
    decode_cpu_ms: list[float]
    decode_bgr_cpu_ms: list[float]
    agent: list[ClipReport]

    @property
    def median_agent(self) -> ClipReport:
        return sorted(self.agent, key=lambda r: r.fps)[len(self.agent) // 2]


def add_stand_in_arguments(p: argparse.ArgumentParser) -> None:
    """What the stand-in edge says (StandInEdge), for the device and cameras benches."""
    p.add_argument(
        "--edge-input",
        type=int,
        default=-1,
        help="detector input side the stand-in edge announces, as an edge node does (the "
        "default agent scales frames to fit it); -1: the edge's default detector's; 0: none "
        "(full-size payloads)",
    )
    p.add_argument(
        "--edge-gap",
        type=int,
        default=0,
        help="keep 1 frame in N with motion, as the stand-in edge advises the way an edge's "
        "calibration does (the share kept in service); 0: no advice (every frame with motion)",
    )


def stand_in_of(args: argparse.Namespace) -> StandInEdge:
    """The StandInEdge the options ask for (--edge-input -1: the default detector's)."""
    repo = args.models_repository
    side = edge_model_input(repo) if args.edge_input < 0 else args.edge_input
    return StandInEdge(side, args.edge_gap)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench device`'s options."""
    p.add_argument("--clip", type=Path, default=ROOT / "data" / "vtest.mp4", help="H.264 clip")
    p.add_argument("--avi", type=Path, default=ROOT / "data" / "vtest.avi", help="vtest.avi")
    p.add_argument(
        "--synthetic",
        default="width=640,height=480,frames=300,seed=1",
        help="synthetic clip parameters (key=value,...)",
    )
    p.add_argument("--repeats", type=int, default=3, help="alternating runs of each side")
    p.add_argument("--motion-threshold", type=float, help="override device.motion.threshold")
    p.add_argument("--gate-name", help="gate model name in the repository (mobilenetv3_small)")
    p.add_argument("--models-repository", default="", help="model repository (default: starter)")
    p.add_argument("--gate-model", help="ONNX classifier file instead of a repository model")
    p.add_argument(
        "--positive-classes",
        help="comma-separated class ids for the relevance gate (default: the config's)",
    )
    p.add_argument("--gate-threshold", type=float, help="override device.gate.threshold")
    p.add_argument(
        "--decode-threads",
        type=int,
        default=0,
        help="decoder threads on all sides (device.source.decode_threads; 0: PyAV's default)",
    )
    p.add_argument(
        "--decode-ahead",
        choices=("auto", "on", "off"),
        default="auto",
        help="device.source.decode_ahead for the agent (auto: on with one camera on 2+ cores)",
    )
    p.add_argument(
        "--scale",
        type=int,
        default=0,
        help="scale frames to fit NxN while decoding, as for an edge model of that input "
        "(0: full size)",
    )
    add_stand_in_arguments(p)
    p.add_argument(
        "--encoding", choices=("jpeg", "bgr", "h264"), default="jpeg", help="payload encoding"
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument(
        "--motion-sweep",
        default="0,2,4,6,8,10,14,20",
        help="motion thresholds for the frames-kept curve (gate off); empty: none",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="1 repeat, no vtest.avi, a 120-frame synthetic clip, 4 sweep points (strata bench)",
    )


def _prepare_clip(args: argparse.Namespace) -> bool:
    """Apply --quick; False when there is no clip to measure."""
    if args.quick:
        args.repeats, args.avi = 1, Path("/nonexistent")
        args.synthetic = args.synthetic.replace("frames=300", "frames=120")
        args.motion_sweep = "0,4,10,20"
    if args.quick and not args.clip.exists():
        # No real clip here (no apt): --quick still measures a 768x576 H.264 clip.
        print(f"bench: {args.clip} missing; --quick uses a synthetic 768x576 clip", file=sys.stderr)
        fallback = Path(tempfile.mkdtemp(prefix="strata-bench-")) / "synthetic-768x576.mp4"
        args.clip = SyntheticClip(width=768, height=576, frames=300, seed=2).write(fallback)
    if not args.clip.exists():
        print(f"bench: {args.clip} missing; run `python .ci/test_data.py`", file=sys.stderr)
        return False
    return True


def _base_config(args: argparse.Namespace) -> DeviceConfig:
    motion: dict[str, Any] = {}
    if args.motion_threshold is not None:
        motion["threshold"] = args.motion_threshold
    gate: dict[str, Any] = {"enabled": True}
    if args.gate_model:
        gate["model_path"] = args.gate_model
    if args.gate_name:
        gate["model"] = args.gate_name
    if args.positive_classes:
        gate["positive_class_ids"] = [int(x) for x in args.positive_classes.split(",")]
    if args.gate_threshold is not None:
        gate["threshold"] = args.gate_threshold
    return DeviceConfig(
        agent_id="bench",
        motion=MotionConfig(**motion),
        gate=GateConfig(**gate),
        source=SourceConfig(decode_threads=args.decode_threads, decode_ahead=args.decode_ahead),
        payload=PayloadConfig(max_width=args.scale, max_height=args.scale),
        sender=SenderConfig(encoding=args.encoding),
    )


def _throughput(
    clip: Path, base: DeviceConfig, repeats: int, repository: str, stand_in: StandInEdge
) -> Throughput:
    out = Throughput(0, [], [], [], [], [])
    frames = 0
    run_agent(clip, base, repository, stand_in=stand_in)  # warm-up: model load, cache
    for _ in range(repeats):
        frames, s, cpu = decode_fps(clip, base.source)
        out.decode_fps.append(frames / s)
        out.decode_cpu_ms.append(cpu / frames * 1000)
        n, s, cpu = decode_fps(clip, base.source, bgr=True)
        out.decode_bgr_fps.append(n / s)
        out.decode_bgr_cpu_ms.append(cpu / n * 1000)
        out.agent.append(run_agent(clip, base, repository, stand_in=stand_in))
    return Throughput(
        frames,
        out.decode_fps,
        out.decode_bgr_fps,
        out.decode_cpu_ms,
        out.decode_bgr_cpu_ms,
        out.agent,
    )


def _motion_sweep(
    clips: list[Path], base: DeviceConfig, thresholds: str, repository: str, stand_in: StandInEdge
) -> list[dict[str, Any]]:
    """Frames kept by the motion gate alone at each threshold."""
    sweep: list[dict[str, Any]] = []
    for t in (float(x) for x in thresholds.split(",") if x.strip()):
        cfg = base.model_copy(
            update={
                "motion": base.motion.model_copy(update={"threshold": t}),
                "gate": base.gate.model_copy(update={"enabled": False}),
            }
        )
        for path in clips:
            r = run_agent(path, cfg, repository, stand_in=stand_in)
            kept = round(r.sent / r.frames, 4) if r.frames else 0.0
            sweep.append({"clip": path.name, "threshold": t, "kept_fraction": kept})
    return sweep


def _result(
    tp: Throughput,
    clips: dict[str, ClipReport],
    sweep: list[dict[str, Any]],
    base: DeviceConfig,
    info: dict[str, Any],
    command: str,
) -> dict[str, Any]:
    main_run = tp.median_agent
    dec = statistics.median(tp.decode_fps)
    dec_bgr = statistics.median(tp.decode_bgr_fps)
    dec_cpu = statistics.median(tp.decode_cpu_ms)
    agent_cpu = statistics.median(r.cpu_seconds / r.frames * 1000 for r in tp.agent)
    return {
        "decode_fps": dec,
        "decode_bgr_fps": dec_bgr,
        "agent_fps": main_run.fps,
        "ratio": main_run.fps / dec,
        "ratio_vs_decode_bgr": main_run.fps / dec_bgr,
        "frames": tp.frames,
        "dropped_motion": main_run.dropped_motion,
        "dropped_gate": main_run.dropped_gate,
        "kept_fraction": main_run.sent / main_run.frames if main_run.frames else 0.0,
        "bytes_sent": main_run.bytes_sent,
        "bytes_source": main_run.bytes_source,
        "decode_fps_runs": tp.decode_fps,
        "decode_bgr_fps_runs": tp.decode_bgr_fps,
        "agent_fps_runs": [r.fps for r in tp.agent],
        # Process CPU time per frame (all threads; the stand-in edge's process apart):
        # what the ratio tends to when other work leaves no core idle, as with many
        # cameras on one host.
        "decode_cpu_ms_per_frame": dec_cpu,
        "decode_bgr_cpu_ms_per_frame": statistics.median(tp.decode_bgr_cpu_ms),
        "agent_cpu_ms_per_frame": agent_cpu,
        "cpu_ratio": dec_cpu / agent_cpu,
        "sink_cpu_ms_per_frame": statistics.median(
            r.sink_cpu_seconds / r.frames * 1000 for r in tp.agent
        ),
        "clips": {k: asdict(v) for k, v in clips.items()},
        "motion_sweep": sweep,
        "config": {
            "motion": base.motion.model_dump(),
            "gate": base.gate.model_dump(),
            "sender": base.sender.model_dump(),
        },
        "machine": {**info, "load_avg_1m_at_end": os.getloadavg()[0]},
        "command": command,
    }


def _print(result: dict[str, Any], clips: dict[str, ClipReport], info: dict[str, Any]) -> None:
    print(
        f"decode {result['decode_fps']:.1f} fps (decode + BGR {result['decode_bgr_fps']:.1f}), "
        f"agent {result['agent_fps']:.1f} fps keeping {result['kept_fraction']:.1%}, "
        f"ratio {result['ratio']:.2f} "
        f"({result['ratio_vs_decode_bgr']:.2f} vs decode + BGR) "
        f"({result['frames']} frames, {info['cpu']}, {info['cores']} cores, load "
        f"{info['load_avg_1m_at_start']:.1f} -> {os.getloadavg()[0]:.1f}); CPU per frame: "
        f"decode {result['decode_cpu_ms_per_frame']:.2f} ms, "
        f"decode + BGR {result['decode_bgr_cpu_ms_per_frame']:.2f} ms, "
        f"agent {result['agent_cpu_ms_per_frame']:.2f} ms (ratio {result['cpu_ratio']:.2f}; "
        f"the stand-in edge's process {result['sink_cpu_ms_per_frame']:.2f} ms apart)"
    )
    for name, r in clips.items():
        print(
            f"  {name}: {r.frames} frames, motion dropped {r.motion_drop_fraction:.1%}, "
            f"gate dropped {r.gate_drop_fraction:.1%} of the rest, sent {r.sent}, "
            f"bytes sent {r.bytes_sent} = {r.bytes_ratio:.2f} x the file ({r.bytes_source})"
        )


def run(args: argparse.Namespace) -> int:
    """Throughput, gate drops and the motion sweep; 2 when there is no clip."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not _prepare_clip(args):
        return 2
    base = _base_config(args)
    info = machine()
    repo = args.models_repository
    stand_in = stand_in_of(args)
    tp = _throughput(args.clip, base, args.repeats, repo, stand_in)
    clips: dict[str, ClipReport] = {args.clip.name: tp.median_agent}
    if args.avi.exists():
        clips[args.avi.name] = run_agent(args.avi, base, repo, stand_in=stand_in)
    params = {k: int(v) for k, v in (kv.split("=") for kv in args.synthetic.split(",") if kv)}
    with tempfile.TemporaryDirectory() as tmp:
        syn = SyntheticClip(**params).write(Path(tmp) / "synthetic.mp4")  # type: ignore[arg-type]
        clips["synthetic"] = run_agent(syn, base, repo, stand_in=stand_in)
        sweep_clips = [syn] if args.quick else [syn, args.clip]
        sweep = _motion_sweep(sweep_clips, base, args.motion_sweep, repo, stand_in)
    result = _result(tp, clips, sweep, base, info, args.command_line)
    result["config"]["edge_input"] = stand_in.model_input
    result["config"]["edge_gap"] = stand_in.gap
    _print(result, clips, info)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0
