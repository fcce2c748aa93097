"""The install extras: a GPU install ends with exactly one ONNX Runtime, and it is the GPU one.

The extras are resolved from pyproject.toml (self-references such as `strata[cpu,test]`
expanded), and the base dependencies' own requirements are walked through the installed
metadata, so a dependency that pulled in `onnxruntime` would be seen too.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from strata.shared.runtime.ort_dists import (
    ORT_DISTRIBUTIONS,
    installed_ort_distributions,
    normalize,
    ort_conflict,
)

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# The install commands the project documents (Makefile, .ci, containers, README).
SUPPORTED = {
    "cpu": "onnxruntime",
    "gpu": "onnxruntime-gpu",
    "dev": "onnxruntime",
    "cpu,test": "onnxruntime",
    "cpu,test,quantize": "onnxruntime",
    "gpu,test": "onnxruntime-gpu",
    "dev,export": "onnxruntime",
    "gpu-torch,test": "onnxruntime",
}


def _name(req: str) -> tuple[str, set[str]]:
    m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", req)
    assert m, req
    extras = {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
    return normalize(m.group(1)), extras


def _installed_requires(name: str, seen: set[str]) -> set[str]:
    """Distribution names `name` requires (unconditional requirements), transitively."""
    if name in seen:
        return set()
    seen.add(name)
    try:
        reqs = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return set()
    out: set[str] = set()
    for r in reqs:
        if ";" in r and "extra" in r.split(";", 1)[1]:
            continue
        dep, _ = _name(r.split(";", 1)[0])
        out |= {dep} | _installed_requires(dep, seen)
    return out


def resolve(extras: str) -> set[str]:
    """Distribution names `pip install 'strata[extras]'` asks for, directly or through base."""
    wanted: set[str] = set()
    todo = [e for e in extras.split(",") if e]
    done: set[str] = set()
    reqs = list(PROJECT["dependencies"])
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        assert extra in PROJECT["optional-dependencies"], f"no extra {extra!r}"
        reqs += PROJECT["optional-dependencies"][extra]
    for r in reqs:
        name, sub = _name(r)
        if name == normalize(PROJECT["name"]):
            todo = [e for e in sub if e not in done]
            for e in todo:
                wanted |= resolve(e)
            continue
        wanted.add(name)
    seen: set[str] = set()
    for base in list(wanted):
        wanted |= _installed_requires(base, seen)
    return wanted


def test_base_dependencies_name_no_onnx_runtime() -> None:
    base = {_name(r)[0] for r in PROJECT["dependencies"]}
    assert base & ORT_DISTRIBUTIONS == set(), "ONNX Runtime belongs in the cpu or gpu extra"


@pytest.mark.parametrize(("extras", "expected"), sorted(SUPPORTED.items()))
def test_each_supported_install_has_exactly_one_onnx_runtime(extras: str, expected: str) -> None:
    found = resolve(extras) & ORT_DISTRIBUTIONS
    assert found == {expected}, f"strata[{extras}] would install {sorted(found)}"


def test_the_resolver_sees_two_runtimes_when_cpu_and_gpu_are_combined() -> None:
    # The check above can fail: this combination really asks for both.
    assert resolve("dev,gpu") & ORT_DISTRIBUTIONS == {"onnxruntime", "onnxruntime-gpu"}


def test_tensorrt_is_pinned_to_major_10() -> None:
    trt = [r for r in PROJECT["optional-dependencies"]["gpu"] if _name(r)[0] == "tensorrt"]
    assert trt and "<11" in trt[0] and ">=10" in trt[0]


def test_the_gpu_extra_has_nvml() -> None:
    assert "nvidia-ml-py" in {_name(r)[0] for r in PROJECT["optional-dependencies"]["gpu"]}


def test_makefile_and_containers_install_one_runtime_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "EXTRAS ?= cpu,test" in makefile and "EXTRAS=gpu,test" in makefile
    for tier, extra in (("device", "cpu"), ("cloud", "cpu"), ("edge", "gpu")):
        text = (ROOT / "deploy" / "containers" / f"{tier}.Containerfile").read_text()
        assert f"[{extra}]" in text, f"{tier} container must install the {extra} extra"


def test_this_environment_has_one_runtime() -> None:
    found = installed_ort_distributions()
    assert len(found) == 1, found
    assert ort_conflict() is None


def test_a_gpu_run_without_a_gpu_fails_instead_of_skipping() -> None:
    import shutil
    import subprocess
    import sys

    if shutil.which("nvidia-smi"):
        pytest.skip("this host has a GPU")
    target = "tests/edge/test_edge_gpu.py::test_tensorrt_engine_is_cached_with_its_input_size"
    quiet = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert quiet.returncode == 0 and "1 skipped" in quiet.stdout, quiet.stdout
    asked = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", target],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert asked.returncode == 1 and "gpu run, but" in asked.stdout, asked.stdout
