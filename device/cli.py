"""`strata device`: run the device agent on one or more cameras."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.shared.cli.common import add_config_flag, load_or_exit, prune

if TYPE_CHECKING:
    from strata.shared.config.common import LoggingConfig
    from strata.shared.config.device import DeviceConfig
    from strata.shared.config.rules import RulesConfig

    from .agent import Agent
    from .workers import AgentWorkers

log = logging.getLogger("strata.device")

_EPILOG = """\
sources:
  PATH                      a video file (MP4, AVI, MKV, ...); ends at its end unless --loop
  rtsp://HOST:PORT/PATH     an RTSP stream over TCP; reopened with backoff when it dies
  synthetic://?frames=300&seed=1&width=640&height=480&fps=10&objects=4&realtime=0
                            the synthetic clip (moving shapes on a textured background)

Camera ids come from --camera-id (in --source order), else from the source (file stem,
RTSP path, synthetic-SEED). Cameras from the config file (device.cameras) run too.
Several edges: repeat --edge (or device.edges, or dns://NAME:PORT); cameras are spread
over them on a consistent-hash ring and move when an edge stops answering (routing).
SIGHUP reads --config again and runs its cameras: new ones start, removed ones stop
once their frames in flight are settled.
Many cameras: device.processes spreads them over worker processes (default: one per 8
cameras, at most one per core), each a whole agent; /metrics and the exit summary merge
them, and a worker that dies is started again with its cameras.
Exit status: 0 when every camera ended normally or the agent was stopped, 1 when a
camera failed, 2 for a bad config.
"""


def register(subparsers: Any) -> None:
    """Add the `device` subcommand."""
    p = subparsers.add_parser(
        "device",
        help="run the device agent (decode, motion gate, relevance gate, send to an edge node)",
        description="The device agent: decodes cameras, drops quiet and irrelevant frames, "
        "and sends the rest to an edge node over ZeroMQ.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="SRC",
        help="a camera source (repeat for several cameras)",
    )
    p.add_argument(
        "--camera-id",
        action="append",
        default=[],
        metavar="ID",
        help="id of the matching --source (repeat in the same order)",
    )
    p.add_argument(
        "--edge",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="edge node, e.g. tcp://127.0.0.1:5555; repeat for several (cameras are spread "
        "over them), or dns://NAME:PORT for every address NAME resolves to",
    )
    p.add_argument("--agent-id", help="agent id on the wire (default: host name)")
    p.add_argument("--loop", action="store_true", default=None, help="restart files at the end")
    p.add_argument("--no-motion", action="store_true", help="switch the motion gate off")
    p.add_argument("--motion-threshold", type=float, metavar="RMS", help="motion gate threshold")
    p.add_argument("--no-gate", action="store_true", help="switch the relevance gate off")
    p.add_argument(
        "--gate-model", metavar="ONNX", help="ONNX classifier instead of the repository model"
    )
    p.add_argument("--gate-threshold", type=float, metavar="P", help="relevance gate threshold")
    p.add_argument("--encoding", choices=["jpeg", "bgr"], help="payload encoding")
    p.add_argument("--jpeg-quality", type=int, metavar="Q", help="JPEG quality 1-100")
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="Prometheus port (0: off)")
    p.add_argument(
        "--duration", type=float, metavar="S", help="stop after S seconds (default: run on)"
    )
    p.add_argument(
        "--metrics-file",
        metavar="FILE",
        help="write the final metrics here (Prometheus text) at exit, for scripts and the demo",
    )
    add_config_flag(p)
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    device: dict[str, Any] = {
        # --edge replaces the config's edges: one sets `edge`, several (or dns://) `edges`.
        "edge": args.edge[0] if len(args.edge) == 1 and "dns://" not in args.edge[0] else None,
        "edges": (args.edge if len(args.edge) > 1 or "dns://" in args.edge[0] else [])
        if args.edge
        else None,
        "agent_id": args.agent_id,
        "source": {"loop": args.loop},
        "motion": {
            "enabled": False if args.no_motion else None,
            "threshold": args.motion_threshold,
        },
        "gate": {
            "enabled": False if args.no_gate else None,
            "model_path": args.gate_model,
            "threshold": args.gate_threshold,
        },
        "sender": {"encoding": args.encoding, "jpeg_quality": args.jpeg_quality},
        "metrics": {"port": args.metrics_port},
    }
    return prune({"device": device})


def _device_config(args: argparse.Namespace, device: dict[str, Any]) -> Any:
    """The device section with the --source cameras added; ConfigError when invalid."""
    from strata.shared.config import validate_model
    from strata.shared.config.device import DeviceConfig

    extra = [
        {"source": src, "id": args.camera_id[i] if i < len(args.camera_id) else ""}
        for i, src in enumerate(args.source)
    ]
    return validate_model(
        DeviceConfig, {**device, "cameras": [*device["cameras"], *extra]}, source="command line"
    )


def warn_unknown_rule_cameras(rules: RulesConfig, dev: DeviceConfig) -> list[str]:
    """Log a warning for each camera the rules name that this agent does not run; return them.

    Not refused: the rules are the site's (every edge reads the one file), and with cameras
    given by --source other agents may run the ones named here. The edge says it again when
    a camera without rules turns up while the rules' cameras have not (edge/rules/engine.py).
    A file whose device.cameras lists this agent's cameras is checked strictly at load."""
    from strata.shared.config.base import closest

    from .agent import camera_ids

    ids = camera_ids(dev.cameras)
    unknown = rules.unknown_cameras(ids)
    for cam in unknown:
        guess = closest(cam, ids)
        log.warning(
            "rules.cameras.%s: no camera of this agent has that id (its cameras: %s)%s; "
            "rules apply by exact id, so unless another agent runs %r they never fire",
            cam,
            ", ".join(ids),
            f"; did you mean {guess!r}?" if guess else "",
            cam,
        )
    return unknown


def reload_cameras(agent: Any, args: argparse.Namespace) -> bool:
    """SIGHUP: read the config file again and run its cameras (plus --source ones); a bad
    file is logged and changes nothing."""
    from strata.shared.config import ConfigError, load_config

    try:
        cfg = load_config(getattr(args, "config", None), _overrides(args))
        dev = _device_config(args, cfg.device.model_dump())
        added, removed = agent.reload(dev.cameras)
    except (ConfigError, ValueError) as exc:
        log.error("reload refused, cameras unchanged: %s", exc)
        return False
    log.info(
        "reloaded: %d camera(s) added (%s), %d removed (%s; draining)",
        len(added),
        ", ".join(added) or "-",
        len(removed),
        ", ".join(removed) or "-",
    )
    return True


def _started_agent(
    dev: DeviceConfig, models_repository: str, logging_cfg: LoggingConfig
) -> Agent | AgentWorkers | None:
    """The agent, its /metrics served and its cameras started: in this process, or over
    worker processes (device.processes); None when it cannot start (said on stderr)."""
    from strata.shared.metrics_web import serve_or_exit

    from .agent import Agent
    from .filters.gate import GateLoadError
    from .transport.sender import SenderError
    from .workers import AgentWorkers, WorkerError, worker_count

    agent: Agent | AgentWorkers
    try:
        if worker_count(dev) > 1:
            agent = AgentWorkers(dev, models_repository, logging_cfg)
            serve_or_exit(agent.registry, dev.metrics, "device")
            agent.start()
        else:
            agent = Agent(dev, models_repository=models_repository)
            serve_or_exit(agent.registry, dev.metrics, "device")
            agent.start()  # SenderError when the edge endpoint is unusable
    except (GateLoadError, ValueError, SenderError, WorkerError) as exc:
        print(f"strata device: {exc}", file=sys.stderr)
        return None
    return agent


def run(args: argparse.Namespace) -> int:
    """Run the agent until its sources end, --duration passes, or SIGINT/SIGTERM."""
    if len(args.camera_id) > len(args.source):
        print("strata device: more --camera-id than --source", file=sys.stderr)
        return 2
    cfg = load_or_exit(args, _overrides(args), "device")
    from strata.shared.config import ConfigError

    from .metrics import CameraCounts

    try:
        dev = _device_config(args, cfg.device.model_dump())
    except ConfigError as exc:
        print(f"strata device: {exc}", file=sys.stderr)
        return 2
    if not dev.cameras:
        print("strata device: no cameras; give --source (see --help)", file=sys.stderr)
        return 2
    warn_unknown_rule_cameras(cfg.rules, dev)
    agent = _started_agent(dev, cfg.models.repository, cfg.logging)
    if agent is None:
        return 2

    stop = threading.Event()
    hup = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        signal.signal(signal.SIGHUP, lambda *_: hup.set())
    deadline = time.monotonic() + args.duration if args.duration else float("inf")
    while not stop.is_set() and time.monotonic() < deadline:
        if hup.is_set():
            hup.clear()
            reload_cameras(agent, args)
            log.info("SIGHUP: looking for a newer model version")
            agent.request_model_check()
        if agent.cameras_done() and not agent.draining():
            break
        stop.wait(0.1)
    agent.stop()
    if args.metrics_file:
        from prometheus_client import generate_latest

        Path(args.metrics_file).write_bytes(generate_latest(agent.registry))
    failed = 0
    for s in agent.statuses():
        failed += s.state.value == "failed"
        c = CameraCounts.read(agent.registry, s.camera_id)
        log.info(
            "camera %s: %s; decoded %d, dropped by motion %d, by gate %d, sent %d, acked %d, "
            "overflowed %d, reconnects %d, edge unreachable %d, edge reconnects %d%s",
            s.camera_id,
            s.state.value,
            c.decoded,
            c.dropped_motion,
            c.dropped_gate,
            c.sent,
            c.acked,
            c.overflowed,
            c.reconnects,
            c.edge_unreachable,
            c.edge_reconnects,
            f" ({s.error})" if s.error else "",
        )
        if s.target_missed > 0:
            log.warning(
                "camera %s: cascade target MISSED by %.3f (strata_device_cascade_target_missed)",
                s.camera_id,
                s.target_missed,
            )
        # The site gate's state (one process's agent; worker processes log their own).
        route = getattr(agent, "site", None)
        site = route.gate.status(s.camera_id) if route is not None else None
        if site is not None:
            log.info("camera %s: %s", s.camera_id, site.line())
    return 1 if failed else 0
