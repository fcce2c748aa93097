"""Camera state and rates from the daemons' /metrics (cloud.http.scrape; optional).

Reads what the device agents and edges already export (strata_device_camera_state,
strata_device_camera_last_error, strata_device_frames_*_total, strata_edge_camera_frames_total)
and turns counters into rates between two scrapes. A daemon that cannot be read is reported
by URL, never an error of the page.
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


@dataclass(slots=True)
class CameraLive:
    """What the daemons say of one camera now."""

    state: str = ""
    error: str = ""
    rates: dict[str, float] = field(default_factory=dict)


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
        return ScrapeResult(cams, failed)

    def _parse(self, url: str, text: str, now: float, cams: dict[str, CameraLive]) -> None:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                cam = s.labels.get("camera", "")
                if not cam:
                    continue
                if s.name == "strata_device_camera_state" and s.value == 1:
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
