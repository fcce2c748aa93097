"""The tier metrics the demo reads (sample names as scraped: counters end in _total).

These are the daemons' real metric names; the demo test checks each one is exported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Metric:
    """A sample of one tier, summed over labels unless `labels` narrows it."""

    tier: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()


# Progress and frame counts, in pipeline order.
COUNTS: dict[str, Metric] = {
    "decoded": Metric("device", "strata_device_frames_decoded_total"),
    # Frames the cascade's gap held back that the source never decoded (source.skip_held):
    # with those decoded, every frame of the source.
    "held": Metric("device", "strata_device_source_skipped_total", (("reason", "held"),)),
    "dropped_motion": Metric("device", "strata_device_frames_dropped_motion_total"),
    "dropped_gate": Metric("device", "strata_device_frames_dropped_gate_total"),
    # The cascade policy's own drops: frames with motion that the accuracy target lets it
    # skip (its motion drops are the motion gate's, counted above).
    "dropped_cascade": Metric(
        "device",
        "strata_device_cascade_decisions_total",
        (("decision", "dropped"), ("reason", "min_gap")),
    ),
    "sent_to_edge": Metric("device", "strata_device_frames_sent_total"),
    "acked_by_edge": Metric("device", "strata_device_frames_acked_total"),
    "edge_accepted": Metric("edge", "strata_edge_frames_total", (("status", "accepted"),)),
    "detected": Metric("edge", "strata_edge_frames_processed_total"),
    "boxes": Metric("edge", "strata_edge_detections_total"),
    "crops_stored": Metric("edge", "strata_edge_crops_total", (("status", "stored"),)),
    "classified": Metric("cloud", "strata_cloud_inference_count_total"),
    "events_stored": Metric("cloud", "strata_cloud_events_stored_total"),
}

# Drops by reason: (tier, sample name, the label that holds the reason).
DROPS: tuple[tuple[str, str, str], ...] = (
    # Source degradation (degraded_*), sheds, rejections, a full spool: by camera and reason.
    ("device", "strata_device_frames_dropped_total", "reason"),
    ("edge", "strata_edge_drops_total", "reason"),
    ("edge", "strata_edge_rejected_total", "reason"),
    ("cloud", "strata_cloud_request_failure_total", "reason"),
)
# Drops without a reason label: name -> (tier, sample name).
PLAIN_DROPS: dict[str, Metric] = {
    "device.motion": COUNTS["dropped_motion"],
    "device.gate": COUNTS["dropped_gate"],
    "device.cascade_min_gap": COUNTS["dropped_cascade"],
    "device.overflow": Metric("device", "strata_device_frames_overflowed_total"),
    "device.overload": Metric("device", "strata_device_frames_dropped_overload_total"),
    "device.rejected_by_edge": Metric("device", "strata_device_frames_rejected_total"),
}

# Every drop of source degradation (the drops line lists each): the table's "dropped
# degrading at source" row is their sum. The queue policy's drops (level 3) take frames
# waiting to be sent, a few of them resends after no ack that "sent to edge" counts too: the
# table says so under it when there are any.
DEGRADED = ("device.degraded_motion", "device.degraded_rate", "device.degraded_policy")
DEGRADED_POLICY = "device.degraded_policy"

# Per camera, not summed: the accuracy the edge estimates the camera's spacing achieved over
# a calibration window (the device.cascade.metric), as the device heard it; before the first
# window ends (900 frames by default: longer than the demo's clip), the bursts' prediction
# at the gap kept.
PER_CAMERA: dict[str, Metric] = {
    "estimated_accuracy": Metric("device", "strata_device_estimated_accuracy"),
    "calibrated_accuracy": Metric("device", "strata_device_cascade_calibrated_accuracy"),
}

BYTES: dict[str, Metric] = {
    "to_edge": Metric("device", "strata_device_bytes_sent_total"),
    "to_cloud": Metric("edge", "strata_edge_uplink_bytes_total"),
}
