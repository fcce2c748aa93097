"""`strata config check`: a config file checked as every daemon would load it, and its rules'
cameras against the site's camera list wherever that list is known.

The rules are the site's (every edge reads the one file). `device.cameras` with ids is a
camera list, checked at load; cameras given with `strata device --source` are not in the
file, so name them here with `--camera ID` (repeated): a rules camera that is in neither is
refused, with a guess when one is near. Without any camera list the rules' cameras are
listed as not checked (exit 0): the edge reports the ones that never send a frame
(`rules.unseen_camera_s`, strata_edge_rules_camera_unseen).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `config` subcommand (`strata config check`)."""
    p = subparsers.add_parser(
        "config",
        help="check a config file (strict keys, rules against the site's cameras)",
        description="Check a config file as the daemons load it.",
    )
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    c = sub.add_parser(
        "check",
        help="refuse what a daemon would refuse, and rules for cameras the site lacks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("config", metavar="FILE", help="the YAML config file")
    c.add_argument(
        "--camera",
        action="append",
        default=[],
        metavar="ID",
        help="a camera the site runs that device.cameras does not list (given with "
        "`strata device --source ... --camera-id ID`); repeat for each",
    )
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """0: the file loads and its rules name known cameras (or no list is known); 2: refused."""
    from strata.shared.config import ConfigError, load_config
    from strata.shared.config.base import KeyValueError

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"strata config check: {exc}", file=sys.stderr)
        return 2
    listed = [c.id or None for c in cfg.device.cameras]
    known = [*listed, *args.camera]
    named = sorted(cfg.rules.cameras)
    if known:
        try:
            cfg.rules.check_cameras(known, "device.cameras or --camera")
        except KeyValueError as exc:
            where = ".".join(str(p) for p in ("rules", *exc.path))
            print(f"strata config check: {args.config}: {where}: {exc}", file=sys.stderr)
            return 2
        ids = sorted({k for k in known if k})
        print(f"{args.config}: ok ({len(ids)} camera(s); rules for {len(named)}, all known)")
    elif named:
        print(
            f"{args.config}: ok; rules name camera(s) {', '.join(named)}, not checked: no "
            "camera list (device.cameras is empty; give --camera ID for each camera the site "
            "runs with --source)"
        )
    else:
        print(f"{args.config}: ok")
    return 0
