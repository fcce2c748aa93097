"""GPU telemetry under DCGM exporter names: absent without a GPU, exact with one."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import NoReturn

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from strata.shared.gpu_telemetry import (
    DCGM_FIELDS,
    DcgmCollector,
    GpuSample,
    GpuTelemetry,
    NoGpu,
    NvmlSource,
    open_nvml,
)

MIB = 1 << 20


class Scripted:
    """A telemetry source at the NVML boundary whose samples the test sets."""

    def __init__(self, *samples: GpuSample) -> None:
        self.samples = list(samples)
        self.calls = 0

    def sample(self) -> list[GpuSample]:
        self.calls += 1
        return list(self.samples)


def _exposition(source: object) -> str:
    reg = CollectorRegistry()
    reg.register(DcgmCollector(GpuTelemetry(source, 0.0), hostname="edge-a"))  # type: ignore[arg-type]
    return generate_latest(reg).decode()


def test_without_a_gpu_the_metrics_are_absent_not_zero() -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has a GPU")
    source = open_nvml()  # the real NVML binding: no library or no device here
    assert isinstance(source, NoGpu) and source.reason
    assert source.sample() == []
    assert "DCGM_" not in _exposition(source)


def test_samples_are_exported_under_dcgm_names_units_and_labels() -> None:
    s = GpuSample(
        index=0,
        uuid="GPU-abc",
        name="NVIDIA H200",
        temperature_c=71.0,
        memory_used_bytes=10 * 1024 * MIB,
        memory_total_bytes=140 * 1024 * MIB,
        utilization_pct=93.0,
        memory_copy_util_pct=40.0,
        power_w=512.5,
        sm_clock_mhz=1980.0,
        mem_clock_mhz=3201.0,
    )
    reg = CollectorRegistry()
    reg.register(DcgmCollector(GpuTelemetry(Scripted(s), 0.0), hostname="edge-a"))
    labels = {
        "gpu": "0",
        "UUID": "GPU-abc",
        "device": "nvidia0",
        "modelName": "NVIDIA H200",
        "Hostname": "edge-a",
    }
    expected = {
        "DCGM_FI_DEV_GPU_TEMP": 71.0,
        "DCGM_FI_DEV_FB_USED": 10240.0,  # MiB, as dcgm-exporter reports
        "DCGM_FI_DEV_FB_TOTAL": 143360.0,
        "DCGM_FI_DEV_FB_FREE": 133120.0,
        "DCGM_FI_DEV_GPU_UTIL": 93.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 40.0,
        "DCGM_FI_DEV_POWER_USAGE": 512.5,  # W
        "DCGM_FI_DEV_SM_CLOCK": 1980.0,
        "DCGM_FI_DEV_MEM_CLOCK": 3201.0,
    }
    for name, value in expected.items():
        assert reg.get_sample_value(name, labels) == value, name
    text = generate_latest(reg).decode()
    for name, *_ in DCGM_FIELDS:
        assert f"# TYPE {name} gauge" in text


def test_a_field_the_gpu_does_not_report_is_absent() -> None:
    text = _exposition(Scripted(GpuSample(0, "GPU-x", "T4", temperature_c=50.0)))
    assert "DCGM_FI_DEV_GPU_TEMP{" in text
    assert "DCGM_FI_DEV_POWER_USAGE" not in text and "DCGM_FI_DEV_FB_FREE" not in text


def test_samples_are_cached_for_the_interval_and_failures_are_empty() -> None:
    src = Scripted(GpuSample(0, "u", "n", temperature_c=40.0))
    tel = GpuTelemetry(src, max_age_s=60.0)
    assert tel.samples()[0].temperature_c == 40.0
    tel.samples()
    assert src.calls == 1

    class Broken:
        def sample(self) -> list[GpuSample]:
            raise RuntimeError("NVML went away")

    bad = GpuTelemetry(Broken(), 0.0)
    assert bad.samples() == [] and bad.errors == 1


def test_memory_fraction() -> None:
    assert GpuSample(0, "u", "n", memory_used_bytes=9, memory_total_bytes=10).memory_fraction == 0.9
    assert GpuSample(0, "u", "n").memory_fraction is None


@pytest.mark.gpu
def test_nvml_reads_every_gpu(gpu_unavailable: Callable[[str], NoReturn]) -> None:
    source = open_nvml()
    if not isinstance(source, NvmlSource):
        gpu_unavailable(f"no NVML here: {getattr(source, 'reason', '')}")
    samples = source.sample()
    assert samples and all(s.uuid.startswith("GPU-") for s in samples)
    s = samples[0]
    assert s.temperature_c is not None and 0 < s.temperature_c < 120
    assert s.memory_total_bytes and s.memory_used_bytes is not None
    assert "DCGM_FI_DEV_FB_USED{" in _exposition(source)
