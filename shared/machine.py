"""The machine a benchmark ran on: CPU model, cores, memory, GPU if any (every bench uses it)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[str]:
    """GPU names from nvidia-smi (none without it)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def memory_gib() -> float | None:
    """Total memory in GiB."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def describe() -> dict[str, Any]:
    """CPU, cores, memory, GPU, OS and Python."""
    found = gpus()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "memory_gib": memory_gib(),
        "gpu": ", ".join(found) if found else "none",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def cpu_line() -> str:
    """`AMD EPYC 7B13, 2 cores`: what every benchmark prints beside its figures."""
    return f"{cpu_model()}, {os.cpu_count()} cores"


def one_line(m: dict[str, Any]) -> str:
    """`AMD EPYC, 2 cores, 24 GiB, no GPU`."""
    gpu = "no GPU" if m.get("gpu") in (None, "", "none") else str(m["gpu"])
    return f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, {gpu}"
