"""The argument parser every strata command line uses."""

from __future__ import annotations

import argparse
from typing import Any


class Parser(argparse.ArgumentParser):
    """argparse without prefix matching: `--frame 10` is an error, never `--frames 10`.

    Subcommand parsers made by `add_subparsers().add_parser` are of the parent's class, so
    the whole `strata` tree inherits this.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
