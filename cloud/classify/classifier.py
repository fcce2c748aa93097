"""The classifier behind the batcher: a model runner, its labels and its batch buffer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from strata.shared.config.cloud import CloudModelConfig
from strata.shared.contracts import analytics_pb2
from strata.shared.runtime import ModelLoadError, ModelRunner, create_runner

from .verdicts import Judgement, VerdictMap, identity_map, load_verdict_map

if TYPE_CHECKING:
    from strata.shared.models import ModelRepository
    from strata.shared.models.manifest import Manifest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Normalization:
    """value = (pixel * scale - mean) / std per channel, channels in the model's order."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    scale: float = 1.0 / 255.0
    rgb: bool = True


class BatchBuffer:
    """Preallocated input of one model instance: uint8 staging and the NCHW float tensor.

    Filling it is one strided copy (channel order, HWC->CHW, uint8->float32) and two
    in-place operations over the whole batch, so a batch allocates nothing.
    """

    def __init__(self, max_batch: int, size: int, norm: Normalization) -> None:
        self.max_batch = max_batch
        self.staging = np.empty((max_batch, size, size, 3), np.uint8)
        self.tensor = np.zeros((max_batch, 3, size, size), np.float32)
        self._rgb = norm.rgb
        std = np.asarray(norm.std, np.float32)
        mean = np.asarray(norm.mean, np.float32)
        # (x*scale - mean)/std == x*gain - offset
        self._gain = (norm.scale / std).astype(np.float32).reshape(1, 3, 1, 1)
        self._offset = (mean / std).astype(np.float32).reshape(1, 3, 1, 1)

    def fill(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Write model-sized BGR images into the buffer; returns the first len(images) rows."""
        n = len(images)
        for i, img in enumerate(images):
            self.staging[i] = img
        out = self.tensor[:n]
        src = self.staging[:n, :, :, ::-1] if self._rgb else self.staging[:n]
        np.copyto(out, src.transpose(0, 3, 1, 2), casting="unsafe")
        out *= self._gain
        out -= self._offset
        return out


@dataclass(frozen=True, slots=True)
class ClassifierSpec:
    """What a model file does not say itself: its name and version, labels, normalization,
    which output holds the scores and whether they are logits."""

    name: str
    labels: Sequence[str]
    norm: Normalization
    # The repository version (0: version 0 or a plain file).
    version: int = 0
    # The output that holds the scores ("" or unknown: the first).
    output: str = ""
    # None: decide per batch (a bare ONNX file does not say whether it emits logits).
    logits: bool | None = None
    # Which labels confirm which detector labels (None: each label stands for itself).
    verdicts: VerdictMap | None = None


class Classifier:
    """Runs filled batches and turns outputs into probabilities and labels."""

    def __init__(self, runner: ModelRunner, spec: ClassifierSpec, default_size: int = 224) -> None:
        self.runner = runner
        name = spec.name
        self.name = name
        self.norm = spec.norm
        self.version = spec.version
        inp = runner.inputs[0]
        if len(inp.shape) != 4 or inp.shape[1] not in (3, None):
            raise ModelLoadError(
                f"model {name}: input {inp.name} has shape {inp.shape}; want (N, 3, H, W)"
            )
        h, w = inp.shape[2], inp.shape[3]
        if h is not None and w is not None and h != w:
            raise ModelLoadError(f"model {name}: input is {h}x{w}; only square inputs")
        self.size = h if h is not None else (w if w is not None else default_size)
        # A fixed batch axis caps the batch; the batcher pads partial batches.
        self.fixed_batch = inp.shape[0]
        self.labels = tuple(spec.labels)
        names = [o.name for o in runner.outputs]
        self._out = names.index(spec.output) if spec.output in names else 0
        self._logits = spec.logits
        self.verdicts = spec.verdicts if spec.verdicts is not None else identity_map(self.labels)

    def new_buffer(self, max_batch: int) -> BatchBuffer:
        """A buffer for one model instance."""
        size = self.fixed_batch if self.fixed_batch is not None else max_batch
        return BatchBuffer(size, self.size, self.norm)

    def run(self, buffer: BatchBuffer, n: int) -> np.ndarray:
        """Probabilities (n, classes) for the first n rows of a filled buffer."""
        rows = buffer.tensor[: self.fixed_batch] if self.fixed_batch else buffer.tensor[:n]
        out = self.runner.run(rows)[self._out][:n].reshape(n, -1).astype(np.float32, copy=False)
        if self._logits is False:
            return out
        return _softmax(out) if self._logits else _as_probabilities(out)

    def label(self, class_id: int) -> str:
        """The label of a class id (class_N when the model has no label list)."""
        if 0 <= class_id < len(self.labels):
            return self.labels[class_id]
        return f"class_{class_id}"

    def top_k(self, probs: np.ndarray, k: int) -> list[analytics_pb2.LabelScore]:
        """The k best labels of one probability row, best first."""
        k = max(1, min(k, probs.shape[0]))
        idx = np.argpartition(-probs, k - 1)[:k]
        idx = idx[np.argsort(-probs[idx])]
        return [
            analytics_pb2.LabelScore(
                class_id=int(i), label=self.label(int(i)), score=float(probs[i])
            )
            for i in idx
        ]

    def judge(self, detector_label: str, probs: np.ndarray) -> Judgement:
        """The second opinion on the edge detector's label (never a new label)."""
        return self.verdicts.judge(detector_label, probs)

    def close(self) -> None:
        """Release the model."""
        self.runner.close()


def _as_probabilities(out: np.ndarray) -> np.ndarray:
    """Softmax unless the rows already are probabilities."""
    if out.min() >= 0 and np.allclose(out.sum(axis=1), 1.0, atol=1e-3):
        return out
    return _softmax(out)


def _softmax(out: np.ndarray) -> np.ndarray:
    shifted = out - out.max(axis=1, keepdims=True)
    np.exp(shifted, out=shifted)
    shifted /= shifted.sum(axis=1, keepdims=True)
    return np.asarray(shifted, np.float32)


def _read_labels(path: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ModelLoadError(f"cannot read labels file {path}: {exc.strerror}") from exc
    return [line.strip() for line in text.splitlines() if line.strip()]


def runner_options(cfg: CloudModelConfig, max_batch: int) -> dict[str, int | bool]:
    """Back-end options: a GPU runner sizes its buffers for the batcher's largest batch
    (its default of 8 would make every larger batch fail at run time)."""
    options: dict[str, int | bool] = {"threads": cfg.threads} if cfg.threads else {}
    if cfg.backend == "onnxruntime-cpu":
        options["spin"] = cfg.spin
        options["dynamic_block_base"] = cfg.dynamic_block_base
    else:
        options["max_batch"] = max_batch
        options["input_size"] = cfg.input_size
    return options


def load_classifier(cfg: CloudModelConfig, repository: str = "", max_batch: int = 8) -> Classifier:
    """The classifier the config names: an ONNX file, or a model of the repository."""
    options = runner_options(cfg, max_batch)
    if cfg.path:
        runner = create_runner(cfg.path, cfg.backend, **options)
        labels = _read_labels(cfg.labels_file) if cfg.labels_file else []
        spec = ClassifierSpec(Path(cfg.path).stem, labels, Normalization(cfg.mean, cfg.std))
        clf = Classifier(runner, spec, cfg.input_size)
    else:
        clf = _from_repository(cfg, repository, options)
    log.info(
        "classifier %s: input %dx%d, %d labels, backend %s",
        clf.name,
        clf.size,
        clf.size,
        len(clf.labels),
        clf.runner.backend,
    )
    return clf


def _from_repository(
    cfg: CloudModelConfig, repository: str, options: dict[str, int | bool]
) -> Classifier:
    from strata.shared.models import repository_for
    from strata.shared.models.switcher import version_of

    # A repository holding only the edge's detector: the classifier falls back to the starter's.
    repo = repository_for(repository, cfg.name, "cloud.model.name")
    loaded = repo.open(cfg.name, cfg.backend, variant=cfg.variant or None, **options)
    version = version_of(repo, cfg.name, loaded.path)
    return _wrap(
        cfg, loaded.manifest, loaded.runner, version, repo.version_folder(cfg.name, version)
    )


def load_version(
    cfg: CloudModelConfig, repo: ModelRepository, version: int, path: Path, max_batch: int
) -> Classifier:
    """Version `version` of the repository classifier (its checked file at `path`)."""
    from strata.shared.models.repository import check_io

    manifest = repo.manifest(cfg.name, version)
    runner = create_runner(path, cfg.backend, **runner_options(cfg, max_batch))
    try:
        check_io(manifest, runner.inputs, runner.outputs)
    except ModelLoadError:
        runner.close()
        raise
    return _wrap(cfg, manifest, runner, version, repo.version_folder(cfg.name, version))


def _wrap(
    cfg: CloudModelConfig, m: Manifest, runner: ModelRunner, version: int, folder: Path
) -> Classifier:
    try:
        if m.task != "classify":
            raise ModelLoadError(f"model {cfg.name!r} is a {m.task} model; the cloud classifies")
        if m.input.resize != "stretch":
            raise ModelLoadError(
                f"model {cfg.name!r}: the cloud resizes by stretching, "
                f"the manifest asks for {m.input.resize}"
            )
        norm = Normalization(m.input.mean, m.input.std, m.input.scale, m.input.colour == "RGB")
        spec = ClassifierSpec(
            m.name,
            m.labels,
            norm,
            version=version,
            output=m.output.name,
            logits=m.output.format == "logits",
            verdicts=load_verdict_map(folder, m.labels, m.name),
        )
        return Classifier(runner, spec, cfg.input_size)
    except ModelLoadError:
        runner.close()
        raise
