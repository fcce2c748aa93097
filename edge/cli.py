"""`strata edge`: the edge node daemon.

SIGHUP looks for a newer model version and reloads the rules (`rules:`) from the same
config file: validated first (the file, and the labels against the model), a bad file is
refused with a line and the old rules stay; good ones take effect between two frames.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.shared.cli.common import add_config_flag, load_or_exit, prune
from strata.shared.config import ConfigError, load_config
from strata.shared.config.base import KeyValueError
from strata.shared.config.objects import ObjectsConfig, UntrackableLabelError
from strata.shared.config.rules import UnknownLabelError

if TYPE_CHECKING:
    from strata.edge.node import EdgeNode
    from strata.shared.models.detector import DetectorSpec

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the `edge` subcommand."""
    p = subparsers.add_parser(
        "edge",
        help="run the edge node (frames in over ZeroMQ, detections out, crops to the cloud)",
        description="Edge node: batches frames across cameras, runs YOLO, publishes detections.",
    )
    p.add_argument("--listen", metavar="tcp://HOST:PORT", help="ZeroMQ address agents connect to")
    p.add_argument("--cloud", metavar="HOST:PORT", help="cloud gRPC endpoint for crops")
    p.add_argument("--publish", metavar="tcp://HOST:PORT", help="ZeroMQ PUB address of results")
    p.add_argument("--model", metavar="ONNX", help="detector ONNX file (overrides the repository)")
    add_config_flag(p)
    p.set_defaults(func=run)


def resolve_model(name: str, path: str, repository: str) -> Path:
    """The detector's ONNX file: an explicit path, else `name` from the model repository
    (manifest validated, checksum verified)."""
    if path:
        return Path(path)
    from strata.shared.models import ModelRepository

    _manifest, _variant, file = ModelRepository(repository or None).file_of(name)
    return file


def repository_spec(name: str, path: str, repository: str) -> DetectorSpec | None:
    """Preprocessing, layout and labels from the model's manifest: the repository's, or for
    an explicit ONNX path the manifest beside it (a repository folder) if it describes that
    file; None for a bare ONNX file (read as YOLOv8). ModelError for a non-detector."""
    from strata.shared.models import ModelError, ModelRepository
    from strata.shared.models.detector import detector_spec, spec_beside

    try:
        if path:
            return spec_beside(path)
        return detector_spec(ModelRepository(repository or None).manifest(name))
    except ValueError as exc:
        raise ModelError(f"{exc}; set edge.model.name to a detector") from None


def run(args: argparse.Namespace) -> int:
    """Start the node and serve until SIGINT/SIGTERM."""
    overrides = prune(
        {
            "edge": {
                "listen": args.listen,
                "cloud": args.cloud,
                "publish": args.publish,
                "model": {"path": args.model},
            }
        }
    )
    cfg = load_or_exit(args, overrides, "edge")
    from strata.edge.build import NodeOptions, build_node
    from strata.edge.security import EdgeSecurityError, check_binds
    from strata.edge.uplink.spool import SpoolError
    from strata.edge.uplink.stream import UplinkSetupError
    from strata.shared.metrics_web import serve_or_exit
    from strata.shared.runtime import ModelLoadError

    edge = cfg.edge
    try:
        check_binds(edge)  # before the model loads: a refused config costs nothing
        model = resolve_model(edge.model.name, edge.model.path, cfg.models.repository)
        spec = repository_spec(edge.model.name, edge.model.path, cfg.models.repository)
        labels = spec.labels if spec is not None else ()
        # A repository model can switch versions at run time (SIGHUP, versions.poll_s).
        repository = None if edge.model.path else cfg.models.repository
        options = NodeOptions(
            labels=labels, spec=spec, repository=repository, rules=cfg.rules, objects=cfg.objects
        )
        node = build_node(edge, model, edge.model.name, options)
    except (
        ModelLoadError,
        UplinkSetupError,
        SpoolError,
        EdgeSecurityError,
        UntrackableLabelError,
        UnknownLabelError,
    ) as exc:
        print(f"strata edge: {exc}", file=sys.stderr)
        return 2
    serve_or_exit(node.metrics.registry, edge.metrics, "edge")
    try:
        node.start()
    except Exception as exc:  # a busy port or a bad address: say which
        print(f"strata edge: cannot bind: {exc}", file=sys.stderr)
        node.runner.close()
        return 2

    def _term(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        node.request_stop()

    hup = threading.Event()

    def _hup(_signum: int, _frame: Any) -> None:
        hup.set()  # the reload runs below, outside the handler

    signal.signal(signal.SIGHUP, _hup)
    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    while not node.wait(0.2):
        if hup.is_set():
            hup.clear()
            reload(node, getattr(args, "config", None), overrides, cfg.objects)
    node.stop()
    if node.error is not None:
        print(f"strata edge: stopped on error: {node.error}", file=sys.stderr)
        return 1
    return 0


def reload(
    node: EdgeNode, config: str | None, overrides: dict[str, Any], objects: ObjectsConfig
) -> None:
    """SIGHUP: a newer model version, and the rules again from the config file (`objects`,
    the section the node started with, stays: a change of it takes a restart)."""
    log.info("SIGHUP: looking for a newer model version; reloading the rules")
    node.request_model_check()
    if not config:
        log.warning("SIGHUP: no --config file: the rules stay as they are")
        return
    try:
        new = load_config(config, overrides)
        if new.objects != objects:
            log.warning("SIGHUP: the objects section changed: it takes effect on a restart")
        # The rules must name labels this node tracks, not only the new file's.
        new.rules.check_tracked(objects.track)
        node.reconfigure_rules(new.rules)
    except (ConfigError, KeyValueError, UnknownLabelError) as exc:
        log.error("SIGHUP: new rules refused, the old rules stay: %s", exc)
