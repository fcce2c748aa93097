"""Which ONNX Runtime distributions are installed (exactly one may be).

`onnxruntime`, `onnxruntime-gpu` and the other builds all install the one `onnxruntime`
package; with two installed, whichever was written last wins, usually without the CUDA
provider. The GPU back ends check this first so the error names the cause.
"""

from __future__ import annotations

import importlib.metadata
import re

# Every build of ONNX Runtime published under its own name writes the same package.
ORT_DISTRIBUTIONS = frozenset(
    {
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime-directml",
        "onnxruntime-openvino",
        "onnxruntime-training",
        "onnxruntime-qnn",
        "onnxruntime-rocm",
        "ort-nightly",
        "ort-nightly-gpu",
    }
)


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_ort_distributions() -> list[str]:
    """Names of the ONNX Runtime distributions installed in this environment, sorted."""
    names = {normalize(d.metadata["Name"] or "") for d in importlib.metadata.distributions()}
    return sorted(names & ORT_DISTRIBUTIONS)


def ort_conflict() -> str | None:
    """A sentence naming the clash when more than one distribution is installed, else None."""
    found = installed_ort_distributions()
    if len(found) <= 1:
        return None
    keep = "onnxruntime-gpu" if "onnxruntime-gpu" in found else found[0]
    drop = " ".join(n for n in found if n != keep)
    return (
        f"{len(found)} ONNX Runtime distributions are installed ({', '.join(found)}); they "
        f"overwrite one package. Keep one: pip uninstall -y {drop} && "
        f"pip install --force-reinstall {keep}"
    )
