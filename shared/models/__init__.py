"""The model repository: manifests, verified loading, and the `strata models` tools.

from strata.shared.models import ModelRepository
repo = ModelRepository(cfg.models.repository)   # "" -> the starter repository
model = repo.open("yolov8n", backend="onnxruntime-cpu")
model.manifest.input.shape, model.runner.run(batch)
"""

from __future__ import annotations

# The detector spec (strata.shared.models.detector) is not imported here: it needs numpy and
# the vision helpers, which `strata --help` and the config must not load.
from .manifest import (
    MANIFEST_FILE,
    Calibration,
    InputSpec,
    Manifest,
    OutputSpec,
    Source,
    TensorRTBuild,
    Variant,
    dump_manifest,
    load_manifest,
    save_manifest,
)
from .repository import (
    LoadedModel,
    ModelError,
    ModelRepository,
    check_io,
    promote_variant,
    repository_for,
    sha256_of,
    starter_repository,
)

__all__ = [
    "MANIFEST_FILE",
    "Calibration",
    "InputSpec",
    "LoadedModel",
    "Manifest",
    "ModelError",
    "ModelRepository",
    "OutputSpec",
    "Source",
    "TensorRTBuild",
    "Variant",
    "check_io",
    "dump_manifest",
    "load_manifest",
    "promote_variant",
    "repository_for",
    "save_manifest",
    "sha256_of",
    "starter_repository",
]
