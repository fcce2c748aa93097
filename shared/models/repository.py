"""A model repository: one folder per model, each with a manifest and its files.

`ModelRepository(path).open(name)` checks everything a tier needs before the first frame:
the manifest validates, the file exists and matches its checksum, and the loaded model's
input and output agree with the manifest. Any failure is a `ModelError` that says which
model, which file and what disagreed.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..config.base import ConfigError
from ..runtime import ModelLoadError, ModelRunner, TensorSpec, create_runner
from .manifest import MANIFEST_FILE, Manifest, Variant, load_manifest, save_manifest

_CHUNK = 1 << 20
log = logging.getLogger(__name__)


class ModelError(ModelLoadError):
    """A model cannot be used: missing, corrupt, or not what its manifest says."""


def starter_repository() -> Path:
    """The starter repository shipped inside the package (models distilled for vtest.avi)."""
    return Path(str(resources.files("strata.shared") / "starter_models"))


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to run: its manifest, the variant loaded, and the runner."""

    manifest: Manifest
    variant: str
    path: Path
    runner: ModelRunner

    def close(self) -> None:
        """Release the runner."""
        self.runner.close()


class ModelRepository:
    """A folder of models. An empty or None path means the starter repository."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.root = Path(path) if path else starter_repository()
        if not self.root.is_dir():
            raise ModelError(f"model repository {self.root} is not a folder")

    def names(self) -> list[str]:
        """Names of the models in the repository (folders with a manifest), sorted."""
        return sorted(p.parent.name for p in self.root.glob(f"*/{MANIFEST_FILE}"))

    def folder(self, name: str) -> Path:
        """The folder of model `name`."""
        return self.root / name

    def versions(self, name: str) -> list[int]:
        """Numbered versions of `name` (Triton-style folders `<name>/<N>/`), ascending.

        The model's own folder is version 0; `strata models promote` adds 1, 2, ..."""
        folder = self.root / name
        if not folder.is_dir():
            return []
        return sorted(
            int(p.name)
            for p in folder.iterdir()
            if p.name.isdigit() and int(p.name) > 0 and (p / MANIFEST_FILE).is_file()
        )

    def latest_version(self, name: str) -> int:
        """The version a tier loads by default: the highest, else 0 (the model's folder)."""
        found = self.versions(name)
        return found[-1] if found else 0

    def version_folder(self, name: str, version: int) -> Path:
        """Where version `version` of `name` lives (0: the model's own folder)."""
        return self.root / name if version == 0 else self.root / name / str(version)

    def manifest(self, name: str, version: int | None = None) -> Manifest:
        """The validated manifest of `name` (its latest version unless `version` is given);
        ModelError if absent or invalid."""
        base = self.root / name / MANIFEST_FILE
        if not base.is_file():
            known = ", ".join(self.names()) or "none"
            raise ModelError(
                f"model {name!r} not found in repository {self.root} (models: {known}): "
                f"import it (`strata models import {name} FILE -r {self.root}`) or name one "
                "of those models in the config (edge.model.name, device.gate.model, "
                "cloud.model.name)"
            )
        if version is None:
            version = self.latest_version(name)
        path = self.version_folder(name, version) / MANIFEST_FILE
        if not path.is_file():
            known = ", ".join(self.names()) or "none"
            raise ModelError(
                f"model {name!r} has no version {version} in {self.root} "
                f"(versions: {', '.join(map(str, [0, *self.versions(name)]))})"
            )
        try:
            manifest = load_manifest(path)
        except ConfigError as exc:
            raise ModelError(f"model {name!r}: bad manifest {path}: {exc}") from None
        if manifest.name != name:
            raise ModelError(
                f"model {name!r}: manifest {path} names the model {manifest.name!r}; "
                "the folder and the manifest name must agree"
            )
        return manifest

    def file_of(
        self, name: str, variant: str | None = None, version: int | None = None
    ) -> tuple[Manifest, str, Path]:
        """Manifest, variant key and path of a model file (the latest version unless
        `version` is given); checks it exists and its checksum."""
        if version is None:
            version = self.latest_version(name)
        manifest = self.manifest(name, version)
        key, file, sha = _pick(manifest, variant)
        path = self.version_folder(name, version) / file
        if not path.is_file():
            raise ModelError(f"model {name!r} ({key}): file {path} is missing")
        actual = sha256_of(path)
        if actual != sha:
            raise ModelError(
                f"model {name!r} ({key}): checksum mismatch for {path}: "
                f"manifest says {sha}, file has {actual}; the file is corrupt or was replaced "
                "without updating the manifest"
            )
        return manifest, key, path

    def open(
        self,
        name: str,
        backend: str = "onnxruntime-cpu",
        variant: str | None = None,
        **options: Any,
    ) -> LoadedModel:
        """Verify and load `name` (its primary file, or `variant`) with a runtime back end."""
        manifest, key, path = self.file_of(name, variant)
        try:
            runner = create_runner(path, backend, **options)
        except ModelLoadError as exc:
            raise ModelError(f"model {name!r} ({key}): {exc}") from exc
        try:
            check_io(manifest, runner.inputs, runner.outputs)
        except ModelError as exc:
            runner.close()
            raise ModelError(f"model {name!r} ({key}) at {path}: {exc}") from None
        return LoadedModel(manifest, key, path, runner)


def repository_for(path: str | Path | None, name: str, setting: str) -> ModelRepository:
    """The repository that serves model `name`: `path`'s when it holds it, else the starter
    repository's (logged), so a repository holding only an imported detector still serves
    the device's gate and the cloud's classifier. `setting` is the config key naming the
    model, for the error that says the fix."""
    repo = ModelRepository(path or None)
    starter = starter_repository()
    if _holds(repo, name) or repo.root.resolve() == starter.resolve():
        return repo
    if _holds(fallback := ModelRepository(starter), name):
        log.info(
            "model %r: not in repository %s, served from the starter repository %s",
            name,
            repo.root,
            starter,
        )
        return fallback
    known = ", ".join(repo.names()) or "none"
    raise ModelError(
        f"model {name!r} not found in repository {repo.root} (models: {known}) nor in the "
        f"starter repository {starter}: import it (`strata models import {name} FILE "
        f"-r {repo.root}`) or set {setting} to a model one of them holds"
    )


def _holds(repo: ModelRepository, name: str) -> bool:
    return (repo.root / name / MANIFEST_FILE).is_file()


def promote_variant(repo: ModelRepository, name: str, variant: str, new_name: str) -> Manifest:
    """Make `name`'s `variant` a model of its own, `new_name`, with that file as primary.

    Every tier loads a model by name, so this is how a tier runs an INT8 or FP16 file
    without a variant setting: point its model name at `new_name`.
    """
    import shutil

    manifest, key, path = repo.file_of(name, variant)
    v = manifest.variants.get(key)
    if v is None or v.format != "onnx":
        raise ModelError(f"model {name!r}: {variant!r} is not an ONNX variant")
    folder = repo.folder(new_name)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, folder / "model.onnx")
    source = manifest.source.model_copy(
        update={
            "made_by": f"{v.made_by}; promoted from {name}:{key}",
            "notes": (manifest.source.notes + f" ({key} copy of {name})").strip(),
        }
    )
    promoted = manifest.model_copy(
        update={
            "name": new_name,
            "file": "model.onnx",
            "sha256": v.sha256,
            "precision": v.precision,
            "source": source,
            "variants": {},
        }
    )
    promoted = Manifest.model_validate(promoted.model_dump())
    save_manifest(promoted, folder)
    return promoted


def promote_version(
    repo: ModelRepository, name: str, source: str | Path | None = None, variant: str | None = None
) -> tuple[int, Manifest]:
    """Make a new numbered version of `name`: an ONNX file (`source`) or one of the latest
    version's variants becomes the primary file of `<name>/<N+1>/`, with the latest
    manifest's inputs, outputs and labels. The folder appears at once, complete (written
    beside and renamed), so a tier polling the repository never sees half a version. The
    file is loaded and checked against the manifest first; ModelError says why not."""
    import shutil

    latest = repo.latest_version(name)
    manifest = repo.manifest(name, latest)
    if (source is None) == (variant is None):
        raise ModelError("promote a version from either an ONNX file or a variant")
    if variant is not None:
        _m, key, path = repo.file_of(name, variant, latest)
        v = manifest.variants.get(key)
        precision = v.precision if v is not None else manifest.precision
        made_by = f"promoted from {name}:{latest}:{key}"
    else:
        path = Path(str(source))
        if not path.is_file():
            raise ModelError(f"model {name!r}: no file {path} to promote")
        precision = manifest.precision
        made_by = f"promoted from {path.name}"
    runner = None
    try:
        runner = create_runner(path, "onnxruntime-cpu")
        check_io(manifest, runner.inputs, runner.outputs)
    except ModelLoadError as exc:
        raise ModelError(f"model {name!r}: {path} cannot be version {latest + 1}: {exc}") from None
    finally:
        if runner is not None:
            runner.close()
    number = latest + 1
    final = repo.version_folder(name, number)
    part = final.with_name(f".{number}.part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    shutil.copyfile(path, part / "model.onnx")
    source_info = manifest.source.model_copy(
        update={"made_by": f"{manifest.source.made_by}; {made_by} as version {number}"}
    )
    promoted = manifest.model_copy(
        update={
            "file": "model.onnx",
            "sha256": sha256_of(part / "model.onnx"),
            "precision": precision,
            "source": source_info,
            "variants": {},
        }
    )
    promoted = Manifest.model_validate(promoted.model_dump())
    save_manifest(promoted, part)
    part.rename(final)
    return number, promoted


def _pick(manifest: Manifest, variant: str | None) -> tuple[str, str, str]:
    if variant is not None and variant in manifest.variants:
        v: Variant = manifest.variants[variant]
        return variant, v.file, v.sha256
    if variant in (None, "primary", manifest.precision):
        return manifest.precision, manifest.file, manifest.sha256
    known = ", ".join([manifest.precision, *manifest.variants])
    raise ModelError(f"model {manifest.name!r} has no variant {variant!r} (has: {known})")


def check_io(
    manifest: Manifest, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]
) -> None:
    """Raise ModelError where the model's tensors disagree with the manifest."""
    if len(inputs) != 1:
        raise ModelError(f"expected one image input, the model has {len(inputs)}")
    spec = inputs[0]
    want = manifest.input
    if spec.name != want.name:
        raise ModelError(f"input is named {spec.name!r}, the manifest says {want.name!r}")
    if len(spec.shape) != len(want.shape):
        raise ModelError(
            f"input {spec.name!r} has rank {len(spec.shape)} {_fmt(spec.shape)}, "
            f"the manifest says {_fmt(want.shape)}"
        )
    for axis, (got, exp) in enumerate(zip(spec.shape, want.shape, strict=True)):
        # A dynamic model axis accepts whatever the manifest fixes; a fixed model axis must
        # equal the manifest's, and cannot honour a manifest that promises a dynamic one.
        if got is not None and got != exp:
            raise ModelError(
                f"input {spec.name!r} shape {_fmt(spec.shape)} disagrees with the manifest "
                f"{_fmt(want.shape)} at axis {axis}"
            )
    by_name = {o.name: o for o in outputs}
    missing = [name for name in manifest.output.all_names if name not in by_name]
    if missing:
        names = ", ".join(o.name for o in outputs)
        raise ModelError(
            f"no output {', '.join(map(repr, missing))} (the model has: {names}); "
            "name the model's outputs in the manifest's output.name / output.names"
        )
    if manifest.task == "embed":
        out = by_name[manifest.output.name]
        if len(out.shape) != 2:
            raise ModelError(f"output {out.name!r} shape {_fmt(out.shape)} is not [N, D]")
    elif manifest.task == "detect":
        _check_detect_outputs(manifest, [by_name[name] for name in manifest.output.all_names])
    else:
        _check_output(manifest, by_name[manifest.output.name])


def _check_detect_outputs(manifest: Manifest, outs: list[TensorSpec]) -> None:
    """Each detect layout's shape rule (shared/vision/layouts.py), for the outputs the
    decoder reads, against the manifest's labels and input size."""
    h, w = manifest.input.shape[2], manifest.input.shape[3]
    # Imported here: the vision helpers need numpy, which `strata --help` must not load.
    from ..vision.layouts import LayoutError, check_shapes
    from .detector import layout_of

    # Anchor counts follow a square input's side; unknown (0) they go unchecked.
    layout = layout_of(manifest, h if h is not None and h == w else 0)
    try:
        check_shapes(layout, [o.shape for o in outs], [o.name for o in outs])
    except LayoutError as exc:
        raise ModelError(str(exc)) from None


def _check_output(manifest: Manifest, out: TensorSpec) -> None:
    n = manifest.num_classes
    if len(out.shape) != 2 or out.shape[1] not in (None, n):
        raise ModelError(
            f"output {out.name!r} shape {_fmt(out.shape)} is not [N, {n}] "
            f"for the manifest's {n} labels"
        )


def _fmt(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"


__all__ = [
    "LoadedModel",
    "ModelError",
    "ModelRepository",
    "check_io",
    "promote_variant",
    "promote_version",
    "repository_for",
    "sha256_of",
    "starter_repository",
]
