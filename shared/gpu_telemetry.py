"""GPU telemetry through NVML (nvidia-ml-py), exported under NVIDIA's DCGM exporter names.

Dashboards built for dcgm-exporter (DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_FB_USED, ...) work
on strata's endpoints unchanged: same names, units (MiB, C, W, MHz, %) and labels (gpu,
UUID, device, modelName, Hostname). Without NVML (no driver, no GPU, no nvidia-ml-py) the
metrics are absent, never zero. `TelemetrySource` is the boundary a test injects at.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment; None where the GPU does not report a value."""

    index: int
    uuid: str
    name: str
    temperature_c: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_pct: float | None = None
    memory_copy_util_pct: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None

    @property
    def memory_fraction(self) -> float | None:
        """Used over total device memory, 0..1."""
        if not self.memory_used_bytes or not self.memory_total_bytes:
            return None if self.memory_total_bytes is None else 0.0
        return self.memory_used_bytes / self.memory_total_bytes


class TelemetrySource(Protocol):
    """Where GPU samples come from (NVML for real; a test may inject its own)."""

    def sample(self) -> list[GpuSample]:
        """Every GPU's current state; empty when there is none."""
        ...


class NoGpu:
    """The source of a host without NVML: no samples, so no metrics."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def sample(self) -> list[GpuSample]:
        return []


class NvmlSource:
    """NVML through nvidia-ml-py (`import pynvml`); open with `open_nvml()`."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]
        self._ids = [(self._text(nvml.nvmlDeviceGetUUID(h)), self._text(nvml.nvmlDeviceGetName(h)))
                     for h in self._handles]  # fmt: skip

    @staticmethod
    def _text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def _get(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, fn)(*args)
        except self.nvml.NVMLError:  # not supported on this GPU, or transiently unavailable
            return None

    def sample(self) -> list[GpuSample]:
        n = self.nvml
        out = []
        for i, (h, (uuid, name)) in enumerate(zip(self._handles, self._ids, strict=True)):
            mem = self._get("nvmlDeviceGetMemoryInfo", h)
            util = self._get("nvmlDeviceGetUtilizationRates", h)
            power = self._get("nvmlDeviceGetPowerUsage", h)  # milliwatts
            temp = self._get("nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU)
            sm = self._get("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM)
            memclk = self._get("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM)
            out.append(
                GpuSample(
                    index=i,
                    uuid=uuid,
                    name=name,
                    temperature_c=None if temp is None else float(temp),
                    memory_used_bytes=None if mem is None else int(mem.used),
                    memory_total_bytes=None if mem is None else int(mem.total),
                    utilization_pct=None if util is None else float(util.gpu),
                    memory_copy_util_pct=None if util is None else float(util.memory),
                    power_w=None if power is None else power / 1000.0,
                    sm_clock_mhz=None if sm is None else float(sm),
                    mem_clock_mhz=None if memclk is None else float(memclk),
                )
            )
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def open_nvml() -> NvmlSource | NoGpu:
    """NVML when the library, a driver and a GPU are there; else NoGpu (saying why once)."""
    try:
        import pynvml
    except ImportError:
        return NoGpu("nvidia-ml-py is not installed (the gpu extra)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("no GPU telemetry: NVML unavailable (%s)", exc)
        return NoGpu(f"NVML: {exc}")
    try:
        source = NvmlSource(pynvml)
    except pynvml.NVMLError as exc:
        log.warning("no GPU telemetry: NVML could not list devices (%s)", exc)
        return NoGpu(f"NVML: {exc}")
    if not source._handles:
        return NoGpu("NVML sees no GPU")
    return source


class GpuTelemetry:
    """The latest samples of a source, refreshed at most every `max_age_s` (thread-safe).

    The degradation controller and the /metrics scrape read the same samples, so NVML is
    queried at most once per interval however often either asks.
    """

    def __init__(self, source: TelemetrySource, max_age_s: float = 1.0) -> None:
        self.source = source
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._samples: list[GpuSample] = []
        self._at = float("-inf")
        self.errors = 0

    def samples(self) -> list[GpuSample]:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self.max_age_s:
                try:
                    self._samples = self.source.sample()
                except Exception as exc:  # telemetry must never take the node down
                    self.errors += 1
                    log.warning("GPU telemetry failed: %s", exc)
                    self._samples = []
                self._at = now
            return list(self._samples)


# (metric name, help, field of GpuSample, scale) as dcgm-exporter names and units them.
DCGM_FIELDS: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory_used_bytes", 1 / MIB),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).", "memory_total_bytes", 1 / MIB),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization_pct", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "memory_copy_util_pct", 1.0),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz", 1.0),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem_clock_mhz", 1.0),
)
DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")


class DcgmCollector:
    """A Prometheus collector: one gauge family per DCGM field, a sample per GPU reporting it.

    A family with no sample is not emitted at all, so a host without a GPU exports none of
    these names (absent, not zero).
    """

    def __init__(self, telemetry: GpuTelemetry, hostname: str | None = None) -> None:
        self.telemetry = telemetry
        self.hostname = hostname or socket.gethostname()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        samples = self.telemetry.samples()
        for name, doc, field, scale in DCGM_FIELDS:
            fam = GaugeMetricFamily(name, doc, labels=DCGM_LABELS)
            for s in samples:
                value = getattr(s, field)
                if value is None:
                    continue
                labels = [str(s.index), s.uuid, f"nvidia{s.index}", s.name, self.hostname]
                fam.add_metric(labels, float(value) * scale)
            if fam.samples:
                yield fam
        free = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=DCGM_LABELS
        )
        for s in samples:
            if s.memory_used_bytes is not None and s.memory_total_bytes is not None:
                labels = [str(s.index), s.uuid, f"nvidia{s.index}", s.name, self.hostname]
                free.add_metric(labels, (s.memory_total_bytes - s.memory_used_bytes) / MIB)
        if free.samples:
            yield free

    def describe(self) -> Iterator[Any]:
        return iter(())  # unchecked collector: families come and go with the GPUs
