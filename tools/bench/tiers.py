"""Each tier's own benchmark, run as `strata bench TIER --json OUT [--quick]`.

Each runs in a child process of its own: its memory, threads and crashes stay its own, and
one tier's leftovers never slow the next.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIERS = ("device", "edge", "cloud")


@dataclass
class TierRun:
    """One tier benchmark's outcome: its JSON, or why there is none."""

    tier: str
    command: list[str]
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


def command(tier: str, json_path: Path, quick: bool) -> list[str]:
    """The command line of a tier's benchmark."""
    cmd = [sys.executable, "-m", "strata.tools.cli", "bench", tier, "--json", str(json_path)]
    return [*cmd, "--quick"] if quick else cmd


def run_tier(tier: str, out_dir: Path, quick: bool, timeout_s: float) -> TierRun:
    """Run one tier's benchmark in a child process; its output goes to `out_dir/TIER.log`."""
    json_path = out_dir / f"{tier}.json"
    cmd = command(tier, json_path, quick)
    run = TierRun(tier, cmd)
    log_path = out_dir / f"{tier}.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
    run.seconds = time.monotonic() - started
    if rc is None:
        run.error = f"timed out after {timeout_s:.0f}s (log: {log_path})"
    elif rc != 0:
        with log_path.open("rb") as f:
            tail = b"".join(deque(f, maxlen=8)).decode("utf-8", "replace").strip()
        if f"No module named strata.{tier}" in tail or f"No module named 'strata.{tier}" in tail:
            run.error = f"strata.{tier} is not installed"
        elif f"invalid choice: '{tier}'" in tail:
            run.error = f"strata bench has no part {tier!r}"
        else:
            run.error = f"exit status {rc}; last lines of {log_path}:\n{tail}"
    else:
        try:
            run.data = json.loads(json_path.read_text())
        except (OSError, ValueError) as exc:
            run.error = f"no readable JSON at {json_path}: {exc}"
    return run


def lookup(data: dict[str, Any], path: str) -> Any:
    """`a.b.c` in nested dicts (None when absent)."""
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def first_number(data: dict[str, Any], paths: tuple[str, ...]) -> float | None:
    """The first of `paths` that holds a number."""
    for p in paths:
        v = lookup(data, p)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None
