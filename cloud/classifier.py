"""The classifier behind the batcher: a model runner, its labels and its batch buffer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from strata.shared.config.cloud import CloudModelConfig
from strata.shared.contracts import analytics_pb2
from strata.shared.runtime import ModelLoadError, ModelRunner, create_runner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Normalization:
    """Per-channel RGB mean and standard deviation on the 0..1 scale."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]


class BatchBuffer:
    """Preallocated input of one model instance: uint8 staging and the NCHW float tensor.

    Filling it is one strided copy (BGR->RGB, HWC->CHW, uint8->float32) and two in-place
    operations over the whole batch, so a batch allocates nothing.
    """

    def __init__(self, max_batch: int, size: int, norm: Normalization) -> None:
        self.max_batch = max_batch
        self.staging = np.empty((max_batch, size, size, 3), np.uint8)
        self.tensor = np.zeros((max_batch, 3, size, size), np.float32)
        std = np.asarray(norm.std, np.float32)
        mean = np.asarray(norm.mean, np.float32)
        # (x/255 - mean)/std == x*scale - offset
        self._scale = (1.0 / (255.0 * std)).reshape(1, 3, 1, 1)
        self._offset = (mean / std).reshape(1, 3, 1, 1)

    def fill(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Write model-sized BGR images into the buffer; returns the first len(images) rows."""
        n = len(images)
        for i, img in enumerate(images):
            self.staging[i] = img
        out = self.tensor[:n]
        np.copyto(out, self.staging[:n, :, :, ::-1].transpose(0, 3, 1, 2), casting="unsafe")
        out *= self._scale
        out -= self._offset
        return out


class Classifier:
    """Runs filled batches and turns outputs into probabilities and labels."""

    def __init__(
        self,
        runner: ModelRunner,
        labels: Sequence[str],
        norm: Normalization,
        name: str,
        default_size: int = 224,
    ) -> None:
        self.runner = runner
        self.name = name
        self.norm = norm
        spec = runner.inputs[0]
        if len(spec.shape) != 4 or spec.shape[1] not in (3, None):
            raise ModelLoadError(
                f"model {name}: input {spec.name} has shape {spec.shape}; want (N, 3, H, W)"
            )
        h, w = spec.shape[2], spec.shape[3]
        if h is not None and w is not None and h != w:
            raise ModelLoadError(f"model {name}: input is {h}x{w}; only square inputs")
        self.size = h if h is not None else (w if w is not None else default_size)
        # A fixed batch axis caps the batch; the batcher pads partial batches.
        self.fixed_batch = spec.shape[0]
        self.labels = tuple(labels)

    def new_buffer(self, max_batch: int) -> BatchBuffer:
        """A buffer for one model instance."""
        size = self.fixed_batch if self.fixed_batch is not None else max_batch
        return BatchBuffer(size, self.size, self.norm)

    def run(self, buffer: BatchBuffer, n: int) -> np.ndarray:
        """Probabilities (n, classes) for the first n rows of a filled buffer."""
        rows = buffer.tensor[: self.fixed_batch] if self.fixed_batch else buffer.tensor[:n]
        out = self.runner.run(rows)[0][:n].reshape(n, -1)
        return _as_probabilities(out.astype(np.float32, copy=False))

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

    def close(self) -> None:
        """Release the model."""
        self.runner.close()


def _as_probabilities(out: np.ndarray) -> np.ndarray:
    """Softmax when the model emits logits; probabilities pass through."""
    sums = out.sum(axis=1)
    if out.min() >= 0 and np.allclose(sums, 1.0, atol=1e-3):
        return out
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


def load_classifier(cfg: CloudModelConfig, repository: str = "") -> Classifier:
    """The classifier the config names: an ONNX file, or a model of the repository."""
    norm = Normalization(cfg.mean, cfg.std)
    options: dict[str, int] = {"threads": cfg.threads} if cfg.threads else {}
    if cfg.path:
        runner = create_runner(cfg.path, cfg.backend, **options)
        labels = _read_labels(cfg.labels_file) if cfg.labels_file else []
        name = Path(cfg.path).stem
    else:
        runner, labels, norm, name = _from_repository(cfg, repository, options)
    clf = Classifier(runner, labels, norm, name, cfg.input_size)
    log.info(
        "classifier %s: input %dx%d, %d labels, backend %s",
        name,
        clf.size,
        clf.size,
        len(clf.labels),
        runner.backend,
    )
    return clf


def _from_repository(
    cfg: CloudModelConfig, repository: str, options: dict[str, int]
) -> tuple[ModelRunner, list[str], Normalization, str]:
    raise ModelLoadError(
        f"model {cfg.name!r}: the model repository is not available in this build; "
        "set cloud.model.path to an ONNX classifier"
    )
