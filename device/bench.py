"""Device agent benchmark: agent frames/s against bare PyAV decoding, in the same run.

    python -m strata.device.bench --json out/device.json

1. Throughput on an H.264 clip (data/vtest.mp4, 768x576) read as fast as possible:
   bare PyAV decode + conversion to BGR (the physical limit of the agent's input), against
   the whole agent with both gates on, sending to a real ZeroMQ ROUTER that acks every
   frame in this process. Runs alternate (baseline, agent, baseline, ...) so that load
   from other processes hits both alike; the medians are compared.
2. What each gate drops, and the bytes sent against the clip's size, on vtest.avi and on
   the synthetic clip (written as an H.264 MP4 first, so it has a file size).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from strata.shared.config.device import (
    CameraConfig,
    DeviceConfig,
    GateConfig,
    MotionConfig,
    SourceConfig,
)
from strata.shared.machine import cpu_model

from .agent import Agent
from .metrics import CameraCounts
from .sink import FrameSink
from .sources import configure_decoder

log = logging.getLogger("strata.device.bench")

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class ClipReport:
    """One agent run over one clip."""

    clip: str
    frames: int
    seconds: float
    fps: float
    cpu_seconds: float
    dropped_motion: int
    dropped_gate: int
    sent: int
    acked: int
    bytes_sent: int
    bytes_source: int
    motion_drop_fraction: float
    gate_drop_fraction: float
    bytes_ratio: float


def decode_fps(path: Path, cfg: SourceConfig) -> tuple[int, float, float]:
    """Bare PyAV: decode every frame and convert it to BGR; (frames, seconds, CPU seconds)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        configure_decoder(stream, cfg)  # the decoder threading the agent's sources use
        n = 0
        t, cpu = time.perf_counter(), time.process_time()
        for frame in container.decode(stream):
            frame.to_ndarray(format="bgr24")
            n += 1
        return n, time.perf_counter() - t, time.process_time() - cpu


def free_endpoint() -> str:
    """tcp://127.0.0.1:PORT on a port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def run_agent(
    path: Path, base: DeviceConfig, models_repository: str = "", camera_id: str = "bench"
) -> ClipReport:
    """The agent over one clip, to a real acking ROUTER; timed from start to last ack."""
    edge = free_endpoint()
    cfg = DeviceConfig.model_validate(
        {
            **base.model_dump(),
            "edge": edge,
            "cameras": [CameraConfig(id=camera_id, source=str(path)).model_dump()],
        }
    )
    with FrameSink(edge, keep_log=False) as sink:
        agent = Agent(cfg, models_repository, registry=CollectorRegistry())
        t, cpu = time.perf_counter(), time.process_time()
        rc = agent.run_until_done(timeout=600)
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        got = sink.stats
    if rc != 0:
        raise RuntimeError(f"agent failed on {path}: {agent.statuses()}")
    c = CameraCounts.read(agent.metrics.registry, camera_id)
    passed_motion = c.decoded - c.dropped_motion
    size = path.stat().st_size
    if got.frames - got.duplicates != c.acked:
        raise RuntimeError(f"sink got {got.frames} frames, agent counted {c.acked} acks")
    return ClipReport(
        clip=str(path),
        frames=c.decoded,
        seconds=seconds,
        fps=c.decoded / seconds,
        cpu_seconds=cpu,
        dropped_motion=c.dropped_motion,
        dropped_gate=c.dropped_gate,
        sent=c.sent,
        acked=c.acked,
        bytes_sent=c.bytes_sent,
        bytes_source=size,
        motion_drop_fraction=c.dropped_motion / c.decoded if c.decoded else 0.0,
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m strata.device.bench", description=__doc__.splitlines()[0] if __doc__ else ""
    )
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
        help="decoder threads on both sides (device.source.decode_threads; 0: PyAV's default)",
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
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.avi = 1, Path("/nonexistent")
        args.synthetic = args.synthetic.replace("frames=300", "frames=120")
        args.motion_sweep = "0,4,10,20"
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.quick and not args.clip.exists():
        from strata.shared.synthetic import SyntheticClip

        # No real clip here (no apt): --quick still measures a 768x576 H.264 clip.
        print(f"bench: {args.clip} missing; --quick uses a synthetic 768x576 clip", file=sys.stderr)
        fallback = Path(tempfile.mkdtemp(prefix="strata-bench-")) / "synthetic-768x576.mp4"
        args.clip = SyntheticClip(width=768, height=576, frames=300, seed=2).write(fallback)
    if not args.clip.exists():
        print(f"bench: {args.clip} missing; run `python .ci/test_data.py`", file=sys.stderr)
        return 2
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
    base = DeviceConfig(
        agent_id="bench",
        motion=MotionConfig(**motion),
        gate=GateConfig(**gate),
        source=SourceConfig(decode_threads=args.decode_threads),
    )

    info = machine()
    decode_runs: list[float] = []
    decode_cpu: list[float] = []
    agent_runs: list[ClipReport] = []
    frames = 0
    run_agent(args.clip, base, args.models_repository)  # warm-up: model load, page cache
    for _ in range(args.repeats):
        n, s, cpu = decode_fps(args.clip, base.source)
        frames = n
        decode_runs.append(n / s)
        decode_cpu.append(cpu / n * 1000)
        agent_runs.append(run_agent(args.clip, base, args.models_repository))
    dec = statistics.median(decode_runs)
    main_run = sorted(agent_runs, key=lambda r: r.fps)[len(agent_runs) // 2]
    agent = main_run.fps

    clips: dict[str, ClipReport] = {args.clip.name: main_run}
    if args.avi.exists():
        clips[args.avi.name] = run_agent(args.avi, base, args.models_repository)
    from strata.shared.synthetic import SyntheticClip

    params = {k: int(v) for k, v in (kv.split("=") for kv in args.synthetic.split(",") if kv)}
    sweep: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        syn = SyntheticClip(**params).write(Path(tmp) / "synthetic.mp4")  # type: ignore[arg-type]
        clips["synthetic"] = run_agent(syn, base, args.models_repository)
        sweep_clips = [syn] if args.quick else [syn, args.clip]
        for t in (float(x) for x in args.motion_sweep.split(",") if x.strip()):
            # The motion gate alone: the curve shows what each threshold keeps.
            cfg = base.model_copy(
                update={
                    "motion": base.motion.model_copy(update={"threshold": t}),
                    "gate": base.gate.model_copy(update={"enabled": False}),
                }
            )
            for path in sweep_clips:
                r = run_agent(path, cfg, args.models_repository)
                sweep.append(
                    {
                        "clip": path.name,
                        "threshold": t,
                        "kept_fraction": round(r.sent / r.frames, 4) if r.frames else 0.0,
                    }
                )

    result: dict[str, Any] = {
        "decode_fps": dec,
        "agent_fps": agent,
        "ratio": agent / dec,
        "frames": frames,
        "dropped_motion": main_run.dropped_motion,
        "dropped_gate": main_run.dropped_gate,
        "bytes_sent": main_run.bytes_sent,
        "bytes_source": main_run.bytes_source,
        "decode_fps_runs": decode_runs,
        "agent_fps_runs": [r.fps for r in agent_runs],
        # Process CPU time per frame (all threads; the agent's includes the in-process
        # ROUTER): what the ratio tends to when other load leaves no core idle.
        "decode_cpu_ms_per_frame": statistics.median(decode_cpu),
        "agent_cpu_ms_per_frame": statistics.median(
            r.cpu_seconds / r.frames * 1000 for r in agent_runs
        ),
        "clips": {k: asdict(v) for k, v in clips.items()},
        "motion_sweep": sweep,
        "config": {
            "motion": base.motion.model_dump(),
            "gate": base.gate.model_dump(),
            "sender": base.sender.model_dump(),
        },
        "machine": {**info, "load_avg_1m_at_end": os.getloadavg()[0]},
        "command": "python -m strata.device.bench " + " ".join(argv or sys.argv[1:]),
    }
    print(
        f"decode {dec:.1f} fps, agent {agent:.1f} fps, ratio {agent / dec:.2f} "
        f"({frames} frames, {info['cpu']}, {info['cores']} cores, load "
        f"{info['load_avg_1m_at_start']:.1f} -> {os.getloadavg()[0]:.1f}); CPU per frame: "
        f"decode {result['decode_cpu_ms_per_frame']:.2f} ms, "
        f"agent {result['agent_cpu_ms_per_frame']:.2f} ms"
    )
    for name, r in clips.items():
        print(
            f"  {name}: {r.frames} frames, motion dropped {r.motion_drop_fraction:.1%}, "
            f"gate dropped {r.gate_drop_fraction:.1%} of the rest, sent {r.sent}, "
            f"bytes sent {r.bytes_sent} = {r.bytes_ratio:.2f} x the file ({r.bytes_source})"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
