"""The cost model: what each camera costs per day, from the daemons' per-camera counters.

Usage comes from the metrics the tiers export per camera (GPU-seconds apportioned from
each batch, bytes per tier, events and bytes stored); prices from `cost` in the config.
Egress is what leaves the edge site (crops to the cloud, and event clips the devices upload
to the cloud); device-to-edge traffic stays on the site's network and is reported, not
priced. Storage is priced at steady state: a day's events and clips held for
`retention_days`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from strata.shared.config.common import CostConfig

DAY_S = 86_400.0
GB = 1e9

# Prometheus sample name -> Usage field, per tier (camera label `camera`).
EDGE_SAMPLES = {
    "strata_edge_camera_gpu_seconds_total": "edge_gpu_seconds",
    "strata_edge_camera_frames_total": "frames",
}
EDGE_BYTES = {"in": "lan_bytes", "uplink": "egress_bytes"}
CLOUD_SAMPLES = {
    "strata_cloud_camera_gpu_seconds_total": "cloud_gpu_seconds",
    "strata_cloud_camera_events_total": "events",
    "strata_cloud_camera_stored_bytes_total": "stored_bytes",
    "strata_cloud_camera_clip_bytes_total": "clip_bytes",
}


@dataclass(frozen=True, slots=True)
class Usage:
    """One camera's consumption over a window (counter deltas)."""

    edge_gpu_seconds: float = 0.0
    cloud_gpu_seconds: float = 0.0
    frames: float = 0.0
    lan_bytes: float = 0.0
    egress_bytes: float = 0.0
    events: float = 0.0
    stored_bytes: float = 0.0
    # Event clip bytes stored by the cloud (uploaded from the site: egress and storage).
    clip_bytes: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, other: Usage) -> Usage:
        # A counter that went down means the daemon restarted: count from zero again.
        return Usage(
            *(
                max(0.0, getattr(self, f.name) - getattr(other, f.name))
                if getattr(self, f.name) >= getattr(other, f.name)
                else getattr(self, f.name)
                for f in fields(self)
            )
        )


@dataclass(frozen=True, slots=True)
class DailyCost:
    """One camera's cost per day, by item, in the config's currency."""

    gpu: float
    egress: float
    storage: float

    @property
    def total(self) -> float:
        return self.gpu + self.egress + self.storage


def per_day(usage: Usage, window_s: float, prices: CostConfig) -> DailyCost:
    """Price `usage` measured over `window_s` seconds as a day's cost."""
    if window_s <= 0:
        raise ValueError("the window must be positive")
    scale = DAY_S / window_s
    gpu_s = (usage.edge_gpu_seconds + usage.cloud_gpu_seconds) * scale
    stored_gb = (usage.stored_bytes + usage.clip_bytes) * scale / GB
    return DailyCost(
        gpu=gpu_s / 3600.0 * prices.gpu_per_hour,
        egress=(usage.egress_bytes + usage.clip_bytes) * scale / GB * prices.egress_per_gb,
        storage=stored_gb * prices.retention_days / 30.0 * prices.storage_per_gb_month,
    )


@dataclass(frozen=True, slots=True)
class Sample:
    """One parsed sample: name, labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


def parse_exposition(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (the /metrics page)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def usage_by_camera(samples: Iterable[Sample]) -> dict[str, Usage]:
    """Per-camera usage from any mix of edge and cloud samples (summed over daemons)."""
    acc: dict[str, dict[str, float]] = {}
    for s in samples:
        camera = s.labels.get("camera")
        if camera is None:
            continue
        field = EDGE_SAMPLES.get(s.name) or CLOUD_SAMPLES.get(s.name)
        if field is None and s.name == "strata_edge_camera_bytes_total":
            field = EDGE_BYTES.get(s.labels.get("direction", ""))
        if field is None:
            continue
        row = acc.setdefault(camera, {})
        row[field] = row.get(field, 0.0) + s.value
    return {cam: Usage(**row) for cam, row in sorted(acc.items())}


@dataclass(frozen=True, slots=True)
class CascadeCost:
    """A camera's day through the cascade against every frame through the GPU."""

    every_frame: DailyCost
    every_frame_cloud: DailyCost
    cascade: DailyCost

    @property
    def saving(self) -> float:
        """Share of the every-frame (edge GPU) cost the cascade saves, 0..1."""
        base = self.every_frame.total
        return 0.0 if base <= 0 else 1.0 - self.cascade.total / base


def cascade_vs_every_frame(
    fps: float,
    kept_fraction: float,
    detector_s_per_frame: float,
    source_bytes_per_s: float,
    cloud_bytes_per_s: float,
    crops_per_s: float,
    classifier_s_per_crop: float,
    stored_bytes_per_event: float,
    prices: CostConfig,
) -> CascadeCost:
    """Per camera per day: (a) the detector on every frame at the edge, (b) every frame
    sent to a cloud GPU (the source stream as egress), (c) the cascade: the detector on the
    kept frames, crops to the cloud (egress, classifier time, one stored event each)."""
    frames = Usage(edge_gpu_seconds=fps * detector_s_per_frame)
    every = per_day(frames, 1.0, prices)
    cloud = per_day(
        Usage(cloud_gpu_seconds=fps * detector_s_per_frame, egress_bytes=source_bytes_per_s),
        1.0,
        prices,
    )
    cascade = per_day(
        Usage(
            edge_gpu_seconds=fps * kept_fraction * detector_s_per_frame,
            cloud_gpu_seconds=crops_per_s * classifier_s_per_crop,
            egress_bytes=cloud_bytes_per_s,
            stored_bytes=crops_per_s * stored_bytes_per_event,
        ),
        1.0,
        prices,
    )
    return CascadeCost(every, cloud, cascade)
