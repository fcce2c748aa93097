"""Each camera's state as the device agent exports it, for the demo's progress line."""

from __future__ import annotations

from dataclasses import dataclass

from strata.tools.demo.scrape import Samples


@dataclass(frozen=True, slots=True)
class CameraView:
    """What one camera is doing, and why when it is not running."""

    camera: str
    state: str
    error: str  # kind of the last source error ("" when none)
    retry_attempt: int
    retry_in_s: float | None  # seconds to the next reopen, while reconnecting
    # The edge's estimate of the accuracy the camera's spacing achieves (None: not yet).
    estimated: float | None = None
    # The calibration bursts' prediction at the gap kept, until that estimate comes.
    calibrated: float | None = None

    def describe(self) -> str:
        """`cam1 reconnecting (refused), retry 4 in 8 s`; `cam0 running, est. acc. 0.91`."""
        text = f"{self.camera} {self.state}"
        if self.error and self.state != "running":
            text += f" ({self.error})"
        if self.state == "reconnecting" and self.retry_attempt:
            text += f", retry {self.retry_attempt}"
            if self.retry_in_s is not None:
                text += f" in {self.retry_in_s:.0f} s"
        if self.estimated is not None:
            text += f", est. acc. {self.estimated:.2f}"
        elif self.calibrated is not None:
            text += f", est. acc. ~{self.calibrated:.2f} (bursts)"
        return text


def camera_views(device: Samples | None, now: float) -> list[CameraView]:
    """One view per camera in the device's last scrape (`now`: Unix time)."""
    if device is None:
        return []
    state: dict[str, str] = {}
    error: dict[str, str] = {}
    attempt: dict[str, float] = {}
    retry_at: dict[str, float] = {}
    estimated: dict[str, float] = {}
    calibrated: dict[str, float] = {}
    for s in device.samples:
        labels = dict(s.labels)
        cam = labels.get("camera", "")
        if s.name == "strata_device_camera_state" and s.value == 1:
            state[cam] = labels.get("state", "")
        elif s.name == "strata_device_camera_last_error" and s.value == 1:
            error[cam] = labels.get("kind", "")
        elif s.name == "strata_device_camera_retry_attempt":
            attempt[cam] = s.value
        elif s.name == "strata_device_camera_retry_at_seconds":
            retry_at[cam] = s.value
        elif s.name == "strata_device_estimated_accuracy":
            estimated[cam] = s.value
        elif s.name == "strata_device_cascade_calibrated_accuracy":
            calibrated[cam] = s.value
    return [
        CameraView(
            cam,
            state[cam],
            error.get(cam, ""),
            int(attempt.get(cam, 0)),
            max(0.0, retry_at[cam] - now) if retry_at.get(cam) else None,
            estimated.get(cam),
            calibrated.get(cam),
        )
        for cam in sorted(state)
    ]
