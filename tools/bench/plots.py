"""PNG plots of a bench report (matplotlib from the dev extra; optional)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class PlotData:
    """What the plots show; each series is (label -> values)."""

    # Latency samples in milliseconds.
    latency_ms: dict[str, Sequence[float]] = field(default_factory=dict)
    # label -> [(batch size, frames or images per second)]
    throughput: dict[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # label -> [(motion threshold, fraction of frames kept)]
    kept: dict[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # label -> [(fraction of frames kept, box F1 against the detector on every frame)]
    f1_vs_kept: dict[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # label -> [(fraction of frames kept, bytes to the edge / the clip's file)]
    bytes_vs_kept: dict[str, Sequence[tuple[float, float]]] = field(default_factory=dict)


def available() -> str | None:
    """None when matplotlib can be used, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        return "matplotlib is not installed (pip install 'strata[dev]'); no plots written"
    return None


def _save(fig: object, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    import matplotlib.pyplot as plt

    plt.close(fig)  # type: ignore[arg-type]
    return path


def latency_cdf(series: Mapping[str, Sequence[float]], path: Path) -> Path | None:
    """Empirical CDF of each latency series."""
    import matplotlib.pyplot as plt

    data = {k: np.sort(np.asarray(v, np.float64)) for k, v in series.items() if len(v)}
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, v in data.items():
        ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{label} (n={v.size})")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Latency CDF")
    return _save(fig, path)


def xy_plot(
    series: Mapping[str, Sequence[tuple[float, float]]],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str,
) -> Path | None:
    """One line per series."""
    import matplotlib.pyplot as plt

    data = {k: np.asarray(sorted(v), np.float64) for k, v in series.items() if len(v)}
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, v in data.items():
        ax.plot(v[:, 0], v[:, 1], marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return _save(fig, path)


def cascade_curve(
    f1: Mapping[str, Sequence[tuple[float, float]]],
    size: Mapping[str, Sequence[tuple[float, float]]],
    path: Path,
) -> Path | None:
    """Box F1 and bytes against the fraction of frames kept, side by side."""
    import matplotlib.pyplot as plt

    if not any(len(v) for v in f1.values()):
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, series, ylabel in (
        (left, f1, "box F1 vs the detector on every frame"),
        (right, size, "bytes to the edge / the clip's H.264 file"),
    ):
        for label, v in series.items():
            pts = np.asarray(sorted(v), np.float64).reshape(-1, 2)
            if pts.shape[0] == 1:
                ax.plot(pts[:, 0], pts[:, 1], marker="*", markersize=14, ls="", label=label)
            elif pts.shape[0]:
                ax.plot(pts[:, 0], pts[:, 1], marker="o", label=label)
        ax.set_xlabel("fraction of frames kept (sent to the edge)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    left.set_title("Accuracy against frames kept")
    right.set_title("Bytes against frames kept")
    return _save(fig, path)


def write_all(data: PlotData, out: Path) -> tuple[list[Path], list[str]]:
    """Every plot there is data for; returns (written, notes)."""
    why = available()
    if why is not None:
        return [], [why]
    written: list[Path] = []
    notes: list[str] = []
    for name, made in (
        ("latency_cdf.png", latency_cdf(data.latency_ms, out / "latency_cdf.png")),
        (
            "throughput_vs_batch.png",
            xy_plot(
                data.throughput,
                out / "throughput_vs_batch.png",
                "batch size",
                "throughput (items/s)",
                "Throughput against batch size",
            ),
        ),
        (
            "kept_vs_motion_threshold.png",
            xy_plot(
                data.kept,
                out / "kept_vs_motion_threshold.png",
                "motion threshold (RMS grey difference, 0-255)",
                "fraction of frames kept",
                "Frames kept against motion threshold",
            ),
        ),
        (
            "cascade_vs_frames_kept.png",
            cascade_curve(data.f1_vs_kept, data.bytes_vs_kept, out / "cascade_vs_frames_kept.png"),
        ),
    ):
        if made is None:
            notes.append(f"{name}: no data")
        else:
            written.append(made)
    return written, notes
