"""Progress lines of `strata bench` on stderr (stdout stays for figures)."""

from __future__ import annotations

import sys


def say(text: str) -> None:
    """One progress line on stderr."""
    print(f"strata bench: {text}", file=sys.stderr, flush=True)
