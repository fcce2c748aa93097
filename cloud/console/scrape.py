"""Camera state and rates from the daemons' /metrics (cloud.http.scrape; optional).

Reads what the device agents and edges already export (strata_device_camera_state,
strata_device_camera_last_error, strata_device_frames_*_total, strata_edge_camera_frames_total)
and turns counters into rates between two scrapes. A daemon that cannot be read is reported
by URL, never an error of the page.

The device's cascade and site gate too (issue 41: a missed target and the gate's training
and switch-on shown in the console): `CascadeLive` from strata_device_cascade_target,
strata_device_estimated_accuracy and strata_device_cascade_target_missed; `SiteGateLive`
from strata_device_gate_site_* (state, training samples, held-out recall, probes in the
window, what it needs) and strata_device_frames_dropped_gate_total. The agent's /metrics
already carries them (no new message on the wire); each is None for a camera whose device
exports none of it (no cascade, no site gate, an older agent).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

# Counter samples (without _total) -> the rate they become, per camera.
RATES = {
    "strata_device_frames_decoded": "decoded_fps",
    "strata_device_frames_sent": "kept_fps",
    "strata_edge_camera_frames": "detected_fps",
}


# The device's cascade and site gate samples read as they are, per camera (no rate): the
# families (a counter's without _total), and the sample names kept as values -> key.
_DEVICE_FAMILIES = frozenset(
    {
        "strata_device_cascade_target",
        "strata_device_estimated_accuracy",
        "strata_device_cascade_target_missed",
        "strata_device_gate_site_state",
        "strata_device_gate_site_training_samples",
        "strata_device_gate_site_recall",
        "strata_device_gate_site_window_probes",
        "strata_device_gate_site_needs",
        "strata_device_frames_dropped_gate",
    }
)
_VALUES = {
    "strata_device_estimated_accuracy": "estimate",
    "strata_device_cascade_target_missed": "missed_by",
    "strata_device_gate_site_training_samples_total": "samples",
    "strata_device_gate_site_recall": "recall",
    "strata_device_frames_dropped_gate_total": "dropped",
}


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


@dataclass(frozen=True, slots=True)
class CascadeLive:
    """A camera's cascade target as its device says it: what the target is about (f1,
    counting), the target, the edge's last estimate (None: none came yet) and by how much
    the target is missed where the device cannot keep more frames (0: held or recovering)."""

    metric: str
    target: float
    estimate: float | None
    missed_by: float

    @property
    def verdict(self) -> str:
        """`missed` (said by the device), `recovering` (under the target, keeping more
        frames), `held`, or `waiting` (no estimate yet)."""
        if self.missed_by > 0:
            return "missed"
        if self.estimate is None:
            return "waiting"
        return "recovering" if self.estimate < self.target else "held"

    def words(self) -> str:
        """`f1 0.834, target 0.900: MISSED by 0.066`."""
        head = f"{self.metric} {_share(self.estimate)}, target {self.target:.3f}"
        tail = {
            "missed": f"MISSED by {self.missed_by:.3f}",
            "recovering": "under target, keeping more frames",
            "held": "held",
            "waiting": "no estimate yet",
        }[self.verdict]
        return f"{head}: {tail}"

    def as_json(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "target": self.target,
            "estimate": self.estimate,
            "missed_by": self.missed_by,
            "verdict": self.verdict,
            "words": self.words(),
        }


@dataclass(frozen=True, slots=True)
class SiteGateLive:
    """A camera's site gate as its device says it: `state` (training, off, on), training
    samples, held-out recall of object frames (None: no object probe yet), the object and
    empty probes in its window, what it needs to switch on (recall, samples, object_probes,
    empty_probes) and the frames the camera's gate dropped."""

    state: str
    samples: int
    recall: float | None
    object_probes: int
    empty_probes: int
    needs: dict[str, float]
    dropped: int

    def words(self) -> str:
        """`on: recall 0.990 (needs 0.98), 412 samples, 1,204 frames dropped`."""
        n = self.needs
        parts = [f"recall {_share(self.recall)} (needs {n.get('recall', 0):g})"]
        if self.state == "training":
            parts.append(f"{self.samples}/{n.get('samples', 0):g} samples")
            parts.append(
                f"probes {self.object_probes}/{n.get('object_probes', 0):g} object, "
                f"{self.empty_probes}/{n.get('empty_probes', 0):g} empty"
            )
        else:
            parts.append(f"{self.samples} samples")
        parts.append(f"{self.dropped} frames dropped")
        return f"{self.state}: " + ", ".join(parts)

    def as_json(self) -> dict[str, object]:
        return {
            "state": self.state,
            "samples": self.samples,
            "recall": self.recall,
            "object_probes": self.object_probes,
            "empty_probes": self.empty_probes,
            "needs": dict(self.needs),
            "dropped": self.dropped,
            "words": self.words(),
        }


@dataclass(slots=True)
class CameraLive:
    """What the daemons say of one camera now (filled while parsing, then frozen parts)."""

    state: str = ""
    error: str = ""
    rates: dict[str, float] = field(default_factory=dict)
    cascade: CascadeLive | None = None
    site_gate: SiteGateLive | None = None
    # Raw samples of the cascade and the site gate, while parsing.
    _raw: dict[str, float] = field(default_factory=dict)
    _needs: dict[str, float] = field(default_factory=dict)
    _target: tuple[str, float] | None = None
    _gate_state: str = ""

    def finish(self) -> None:
        """Build the cascade's and the site gate's parts from the samples read."""
        raw = self._raw
        if self._target is not None:
            metric, target = self._target
            self.cascade = CascadeLive(
                metric, target, raw.get("estimate"), max(0.0, raw.get("missed_by", 0.0))
            )
        if self._gate_state:
            recall = raw.get("recall")
            self.site_gate = SiteGateLive(
                self._gate_state,
                int(raw.get("samples", 0)),
                recall,
                int(raw.get("object_probes", 0)),
                int(raw.get("empty_probes", 0)),
                dict(self._needs),
                int(raw.get("dropped", 0)),
            )


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """Per camera state and rates, and the URLs that could not be read (with why)."""

    cameras: dict[str, CameraLive]
    failed: dict[str, str]


class Scraper:
    """Scrapes the configured URLs on demand, remembering the last counters for rates."""

    def __init__(self, urls: list[str], timeout_s: float) -> None:
        self.urls = urls
        self.timeout_s = timeout_s
        self._last: dict[tuple[str, str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _read(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
            body: bytes = resp.read(8 * 1024 * 1024)
        return body.decode("utf-8", "replace")

    def scrape(self) -> ScrapeResult:
        """Read every URL now (blocking; call from the executor)."""
        cams: dict[str, CameraLive] = {}
        failed: dict[str, str] = {}
        now = time.monotonic()
        for url in self.urls:
            try:
                text = self._read(url)
                self._parse(url, text, now, cams)
            except Exception as exc:
                failed[url] = str(exc) or type(exc).__name__
                log.warning("console: cannot scrape %s: %s", url, exc)
        for live in cams.values():
            live.finish()
        return ScrapeResult(cams, failed)

    def _parse(self, url: str, text: str, now: float, cams: dict[str, CameraLive]) -> None:
        for family in text_string_to_metric_families(text):
            device_part = family.name in _DEVICE_FAMILIES
            for s in family.samples:
                cam = s.labels.get("camera", "")
                if not cam:
                    continue
                if device_part:
                    _device_part(cams.setdefault(cam, CameraLive()), s.name, s.labels, s.value)
                elif s.name == "strata_device_camera_state" and s.value == 1:
                    cams.setdefault(cam, CameraLive()).state = s.labels.get("state", "")
                elif s.name == "strata_device_camera_last_error" and s.value:
                    cams.setdefault(cam, CameraLive()).error = s.labels.get("kind", "")
                else:
                    rate = RATES.get(s.name.removesuffix("_total"))
                    if rate is not None:
                        self._rate(
                            cams.setdefault(cam, CameraLive()), (url, cam, rate), now, s.value
                        )

    def _rate(self, live: CameraLive, key: tuple[str, str, str], now: float, value: float) -> None:
        with self._lock:
            prev = self._last.get(key)
            self._last[key] = (now, value)
        if prev is not None and now > prev[0] and value >= prev[1]:
            live.rates[key[2]] = round((value - prev[1]) / (now - prev[0]), 2)


def _device_part(live: CameraLive, name: str, labels: dict[str, str], value: float) -> None:
    """One sample of the camera's cascade or site gate into `live`'s raw samples."""
    key = _VALUES.get(name)
    if key is not None:
        live._raw[key] = value
    elif name == "strata_device_cascade_target":
        live._target = (labels.get("metric", ""), value)
    elif name == "strata_device_gate_site_state" and value == 1:
        live._gate_state = labels.get("state", "")
    elif name == "strata_device_gate_site_window_probes":
        live._raw[labels.get("kind", "") + "_probes"] = value
    elif name == "strata_device_gate_site_needs":
        live._needs[labels.get("what", "")] = value
