"""`strata`: one command line, a subcommand per tier and tool.

Each subcommand lives in its own module with `register(subparsers)`; modules are imported
to build the parser, so they must keep heavy imports (onnxruntime, av, grpc) inside `run`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys
from collections.abc import Sequence

from strata.shared.cli.parser import Parser

# subcommand -> module providing register(subparsers). Tiers own their own CLI module.
SUBCOMMANDS: dict[str, str] = {
    "device": "strata.device.cli",
    "device-clips": "strata.device.clips.cli",
    "edge": "strata.edge.cli",
    "cloud": "strata.cloud.cli",
    "models": "strata.tools.models.cli",
    "demo": "strata.tools.demo.cli",
    "bench": "strata.tools.bench.cli",
    "cost": "strata.tools.cost",
    "keys": "strata.tools.keys",
    "config": "strata.tools.config_check",
}


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every subcommand that is installed."""
    parser = Parser(
        prog="strata",
        description="Edge-to-cloud video analytics: spend GPU time only where something happens.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in SUBCOMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name + ".").startswith(exc.name + "."):
                continue  # that component is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `strata` console script."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # --help too may meet a closed pipe
        rc: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        if not stdout_closed():
            raise  # a socket's, not our output's: a real error
        # `strata cloud query | head -1`: the reader has what it wanted. Quiet, with the
        # status a shell gives a command SIGPIPE ended (daemons keep SIGPIPE ignored, as
        # Python sets it, so a peer's closed socket never kills them).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return rc


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports POLLERR for it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (OSError, ValueError):  # no file descriptor (captured output)
        return False


if __name__ == "__main__":
    sys.exit(main())
