"""The demo's report: frames per tier, drops by reason, latency, bytes; JSON and a table."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from strata.shared.contracts import analytics_pb2
from strata.tools.demo.names import (
    BYTES,
    COUNTS,
    DEGRADED,
    DEGRADED_POLICY,
    DROPS,
    PER_CAMERA,
    PLAIN_DROPS,
    Metric,
)
from strata.tools.demo.results import Received
from strata.tools.demo.scrape import Samples


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50/p99 of a latency sample in milliseconds (None when there were no samples)."""

    n: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, values_ns: np.ndarray) -> Percentiles:
        """From nanosecond durations."""
        if values_ns.size == 0:
            return cls(0, None, None, None)
        ms = values_ns.astype(np.float64) / 1e6
        p50, p99 = np.percentile(ms, [50, 99])
        return cls(
            int(ms.size), round(float(p50), 2), round(float(p99), 2), round(float(ms.max()), 2)
        )


@dataclass
class Summary:
    """Everything `summary.json` holds."""

    sources: list[dict[str, Any]]
    frames: dict[str, float]
    drops: dict[str, float]
    latency: dict[str, Percentiles]
    bytes: dict[str, float]
    processes: dict[str, dict[str, Any]]
    duration_s: float
    interrupted: bool = False
    error: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    per_camera: dict[str, dict[str, float]] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> str:
        """Pretty JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=False)

    def write(self, path: Path) -> None:
        """Write summary.json."""
        path.write_text(self.to_json() + "\n")


def value(scrapes: Mapping[str, Samples], metric: Metric) -> float:
    """A metric's sum from the last scrape of its tier (0 when absent)."""
    samples = scrapes.get(metric.tier)
    return samples.total(metric.name, **dict(metric.labels)) if samples else 0.0


def counts(scrapes: Mapping[str, Samples]) -> dict[str, float]:
    """Every named frame count."""
    return {key: value(scrapes, m) for key, m in COUNTS.items()}


def drops(scrapes: Mapping[str, Samples]) -> dict[str, float]:
    """Drops as `tier.reason` -> count, zeros left out."""
    out = {k: value(scrapes, m) for k, m in PLAIN_DROPS.items()}
    for tier, name, label in DROPS:
        samples = scrapes.get(tier)
        if samples is None:
            continue
        for reason, n in samples.by_label(name, label).items():
            key = f"{tier}.{reason}"
            out[key] = out.get(key, 0.0) + n
    return {k: v for k, v in sorted(out.items()) if v}


def accuracy_text(estimated: float | None, calibrated: float | None) -> str:
    """The edge's window estimate; else `~` and the bursts' prediction; else `-`."""
    if estimated is not None:
        return f"{estimated:.3f}"
    return "-" if calibrated is None else f"~{calibrated:.3f}"


def per_camera(
    scrapes: Mapping[str, Samples], results: Mapping[tuple[str, int], Received]
) -> dict[str, dict[str, float]]:
    """The device's counts by camera, and the edge results received for each."""
    out: dict[str, dict[str, float]] = {}
    device = scrapes.get("device")
    if device is not None:
        for key in (
            "decoded",
            "held",
            "dropped_motion",
            "dropped_gate",
            "dropped_cascade",
            "sent_to_edge",
        ):
            m = COUNTS[key]
            for cam, n in device.by_label(m.name, "camera", **dict(m.labels)).items():
                out.setdefault(cam, {})[key] = n
        for key, m in PER_CAMERA.items():
            for cam, v in device.by_label(m.name, "camera").items():
                out.setdefault(cam, {})[key] = v
    for (cam, _index), r in results.items():
        row = out.setdefault(cam, {})
        row["results_received"] = row.get("results_received", 0.0) + 1
        if r.message.predicted:
            # Answered from the edge's tracker (a frame the device did not send).
            row["results_predicted"] = row.get("results_predicted", 0.0) + 1
    return out


def edge_latency_ns(
    results: Mapping[tuple[str, int], Received],
    only: Collection[tuple[str, int]] | None = None,
) -> np.ndarray:
    """Capture to edge result per frame: the edge's send stamp, else the inference end;
    `only`: just the frames of these (camera, capture_ns)."""
    rows = [
        (
            r.message.timing.capture_ns,
            r.message.timing.edge_send_ns,
            r.message.timing.inference_end_ns,
        )
        for (cam, _), r in results.items()
        if only is None or (cam, r.message.timing.capture_ns) in only
    ]
    if not rows:
        return np.zeros(0, dtype=np.int64)
    t = np.array(rows, dtype=np.int64)
    done = np.where(t[:, 1] > 0, t[:, 1], t[:, 2])
    ok = (t[:, 0] > 0) & (done >= t[:, 0])
    return np.asarray(done[ok] - t[ok, 0])


def cloud_latency_ns(events: Sequence[analytics_pb2.Event]) -> np.ndarray:
    """Capture to stored in the cloud, per event."""
    if not events:
        return np.zeros(0, dtype=np.int64)
    t = np.array([(e.capture_ns, e.stored_ns) for e in events], dtype=np.int64)
    ok = (t[:, 0] > 0) & (t[:, 1] >= t[:, 0])
    return np.asarray(t[ok, 1] - t[ok, 0])


def build(
    sources: list[dict[str, Any]],
    scrapes: Mapping[str, Samples],
    results: Mapping[tuple[str, int], Received],
    events: Sequence[analytics_pb2.Event],
    processes: dict[str, dict[str, Any]],
    duration_s: float,
) -> Summary:
    """Assemble the report from the last scrapes, the received results and the events."""
    frames = counts(scrapes)
    dropped = drops(scrapes)
    frames["dropped_degraded"] = sum(dropped.get(k, 0.0) for k in DEGRADED)
    frames["results_received"] = float(len(results))
    frames["results_predicted"] = float(sum(1 for r in results.values() if r.message.predicted))
    frames["frames_with_cloud_events"] = float(len({(e.camera_id, e.sequence) for e in events}))
    frames["cloud_events"] = float(len(events))
    source_bytes = float(sum(int(s.get("bytes") or 0) for s in sources))
    return Summary(
        sources=sources,
        frames=frames,
        drops=dropped,
        latency={
            "capture_to_edge": Percentiles.of(edge_latency_ns(results)),
            "capture_to_cloud": Percentiles.of(cloud_latency_ns(events)),
            # The same frames as capture_to_cloud's: the two compare only over these.
            "capture_to_edge_cloud_frames": Percentiles.of(
                edge_latency_ns(results, {(e.camera_id, e.capture_ns) for e in events})
            ),
        },
        bytes={"source": source_bytes, **{k: value(scrapes, m) for k, m in BYTES.items()}},
        processes=processes,
        duration_s=round(duration_s, 2),
        per_camera=per_camera(scrapes, results),
        metrics={tier: s.as_dict() for tier, s in scrapes.items()},
    )


# The latency rows, named as the table shows them: capture to edge over every frame with a
# result, capture to cloud over the frames whose crops the cloud stored (fewer, and only
# detected ones), and capture to edge over those same frames, the one to compare it with.
LATENCY_ROWS = {
    "capture_to_edge": "capture to edge",
    "capture_to_cloud": "capture to cloud",
    "capture_to_edge_cloud_frames": "  edge, same frames",
}
LATENCY_NOTE = (
    "        capture to edge: every frame with a result, those the device dropped too (the\n"
    "        edge's tracker answers them once the kept frames around them are detected);\n"
    "        capture to cloud: only the frames whose crops the cloud stored: compare it with\n"
    "        the edge's figure for those same frames"
)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def table(s: Summary) -> str:
    """A short terminal table."""
    f = s.frames
    rows = [
        ("device", "frames decoded", f["decoded"]),
        ("device", "held back, not decoded", f.get("held", 0.0)),
        ("device", "dropped by motion gate", f["dropped_motion"]),
        ("device", "dropped by MobileNetV3 gate", f["dropped_gate"]),
        ("device", "dropped by cascade policy", f["dropped_cascade"]),
        ("device", "dropped degrading at source", f.get("dropped_degraded", 0.0)),
        ("device", "sent to edge", f["sent_to_edge"]),
        ("edge", "frames detected", f["detected"]),
        ("edge", "boxes", f["boxes"]),
        ("edge", "crops acked by cloud", f["crops_stored"]),
        ("cloud", "crops classified", f["classified"]),
        ("cloud", "events stored", f["events_stored"]),
    ]
    out = [f"{'tier':<7}{'':<30}{'count':>12}", "-" * 49]
    out += [f"{tier:<7}{what:<30}{_fmt(n):>12}" for tier, what, n in rows]
    out.append("-" * 49)
    for name, what in LATENCY_ROWS.items():
        p = s.latency.get(name)
        if p is not None:
            out.append(
                f"latency {what:<24} p50 {_fmt(p.p50_ms):>7} ms  p99 {_fmt(p.p99_ms):>7} ms"
                f"  n {p.n}"
            )
    out.append(LATENCY_NOTE)
    b = s.bytes
    out.append(
        f"bytes   source {_fmt(b['source'])}  to edge {_fmt(b['to_edge'])}  "
        f"to cloud {_fmt(b['to_cloud'])}"
    )
    if s.drops.get(DEGRADED_POLICY):
        out.append(
            "        degraded_policy: frames waiting to be sent that level 3 let go "
            "(degrade.drop_policy); a resend after no ack among them was sent to edge once"
        )
    if s.drops:
        out.append("drops   " + ", ".join(f"{k} {_fmt(v)}" for k, v in s.drops.items()))
    if s.per_camera:
        out.append(
            f"{'camera':<16}{'decoded':>10}{'held':>8}{'sent':>10}{'results':>10}{'est. acc.':>11}"
        )
        predicted = False
        for cam, row in sorted(s.per_camera.items()):
            keys = ("decoded", "held", "sent_to_edge", "results_received")
            n = [_fmt(row.get(k, 0.0)) for k in keys]
            acc = accuracy_text(row.get("estimated_accuracy"), row.get("calibrated_accuracy"))
            predicted |= acc.startswith("~")
            out.append(f"{cam:<16}{n[0]:>10}{n[1]:>8}{n[2]:>10}{n[3]:>10}{acc:>11}")
        if predicted:
            out.append(
                "~ the calibration bursts' prediction at the gap kept: the edge's estimate of "
                "what the spacing achieved comes once a calibration window ends "
                "(device.cascade.calibrate_every)"
            )
    return "\n".join(out)
