"""The relevance gate: a small classifier (MobileNetV3) on frames that passed the motion gate.

A frame is relevant when the summed probability of the configured positive classes (or the
top probability, with none configured) reaches the threshold. Batches are preprocessed into
one preallocated input tensor; per frame only the resize and a few in-place array ops run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import cv2
import numpy as np
from strata.shared.config.device import GateConfig
from strata.shared.runtime import ModelLoadError, ModelRunner, create_runner

if TYPE_CHECKING:
    from strata.shared.models import ModelRepository
    from strata.shared.models.manifest import Manifest

log = logging.getLogger(__name__)


class GateLoadError(RuntimeError):
    """The gate's model cannot be loaded or does not fit the gate."""


@dataclass(frozen=True, slots=True)
class GateInput:
    """How the classifier wants its input (from the model manifest, or ImageNet defaults)."""

    height: int = 224
    width: int = 224
    rgb: bool = True
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    output: Literal["logits", "probabilities"] = "logits"


class RelevanceGate:
    """Scores batches of BGR frames with a classifier and decides which to keep."""

    def __init__(
        self, runner: ModelRunner, cfg: GateConfig, spec: GateInput, name: str = "gate"
    ) -> None:
        self.runner = runner
        self.cfg = cfg
        self.spec = spec
        self.name = name
        # The repository version this gate is (0: version 0 or a plain file).
        self.version = 0
        n_out = runner.outputs[0].shape[-1] if runner.outputs else None
        bad = [c for c in cfg.positive_class_ids if c < 0 or (n_out and c >= n_out)]
        if bad:
            raise GateLoadError(f"{name}: positive class ids {bad} outside the model's classes")
        self._classes = np.asarray(sorted(set(cfg.positive_class_ids)), np.intp)
        h, w = spec.height, spec.width
        # A fixed-batch model (a batch-1 export) runs in chunks of exactly its batch; the
        # tensor is rounded up so the last chunk is padded (its extra rows are ignored).
        fixed = runner.inputs[0].shape[0] if runner.inputs and runner.inputs[0].shape else None
        self.fixed_batch: int | None = int(fixed) if isinstance(fixed, int) else None
        rows = cfg.max_batch
        if self.fixed_batch is not None:
            rows = -(-cfg.max_batch // self.fixed_batch) * self.fixed_batch
            log.info(
                "%s: the model has a fixed batch of %d: runs %d frames at a time",
                name,
                self.fixed_batch,
                self.fixed_batch,
            )
        self._batch = np.zeros((rows, 3, h, w), np.float32)
        self._resized = np.empty((h, w, 3), np.uint8)
        self._rgb = np.empty((h, w, 3), np.uint8)
        # x * scale - mean) / std folded into one multiply and one add per channel.
        std = np.asarray(spec.std, np.float32)
        self._mul = (spec.scale / std).reshape(1, 3, 1, 1).astype(np.float32)
        self._add = (-np.asarray(spec.mean, np.float32) / std).reshape(1, 3, 1, 1)

    def score(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Relevance score in [0, 1] for each BGR image (at most max_batch of them)."""
        n = len(images)
        if n == 0:
            return np.empty(0, np.float32)
        if n > self.cfg.max_batch:
            raise ValueError(f"batch of {n} exceeds max_batch {self.cfg.max_batch}")
        size = (self.spec.width, self.spec.height)
        for i, image in enumerate(images):
            cv2.resize(image, size, dst=self._resized, interpolation=cv2.INTER_LINEAR)
            src = self._resized
            if self.spec.rgb:
                cv2.cvtColor(self._resized, cv2.COLOR_BGR2RGB, dst=self._rgb)
                src = self._rgb
            # HWC uint8 -> CHW float32 straight into the batch tensor.
            np.copyto(self._batch[i], src.transpose(2, 0, 1), casting="unsafe")
        batch = self._batch[:n]
        np.multiply(batch, self._mul, out=batch)
        np.add(batch, self._add, out=batch)
        out = self._run(n)
        if self.spec.output == "logits":
            out = _softmax(out)
        if self._classes.size:
            return np.asarray(out[:, self._classes].sum(axis=1), np.float32)
        return np.asarray(out.max(axis=1), np.float32)

    def _run(self, n: int) -> np.ndarray:
        """Model outputs (n, classes) for the first n rows of the batch tensor."""
        k = self.fixed_batch
        if k is None:
            return self.runner.run(self._batch[:n])[0].reshape(n, -1).astype(np.float32, copy=False)
        chunks = [self.runner.run(self._batch[i : i + k])[0] for i in range(0, n, k)]
        return np.concatenate(chunks)[:n].reshape(n, -1).astype(np.float32, copy=False)

    @property
    def can_drop(self) -> bool:
        """False when the threshold is 0: every score (a probability) passes it, so running
        the classifier would change nothing the edge sees (the gate worker skips it)."""
        return self.cfg.threshold > 0

    def decide(self, scores: np.ndarray) -> np.ndarray:
        """Boolean keep mask for the scores."""
        return np.asarray(scores >= self.cfg.threshold)

    def close(self) -> None:
        """Release the model."""
        self.runner.close()


def _softmax(logits: np.ndarray) -> np.ndarray:
    z: np.ndarray = logits - logits.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def load_gate(cfg: GateConfig, repository: str = "") -> RelevanceGate:
    """The gate's model: `cfg.model_path` if set, else `cfg.model` from the model repository."""
    options: dict[str, Any] = {"threads": cfg.threads}
    if cfg.model_path:
        try:
            runner = create_runner(cfg.model_path, **options)
        except ModelLoadError as exc:
            raise GateLoadError(f"gate model: {exc}") from None
        spec = _spec_from_runner(runner)
        log.info("gate: %s (ImageNet preprocessing assumed)", cfg.model_path)
        return RelevanceGate(runner, cfg, spec, name=cfg.model_path)
    from strata.shared.models import repository_for
    from strata.shared.models.switcher import version_of

    try:
        # The edge's repository may hold only its detector: the gate falls back to the starter's.
        repo = repository_for(repository, cfg.model, "device.gate.model")
        loaded = repo.open(cfg.model, **options)
    except Exception as exc:  # ModelError and whatever the runtime raises, one clear line
        raise GateLoadError(f"gate model {cfg.model!r}: {exc}") from None
    gate = _wrap(cfg, loaded.manifest, loaded.runner)
    gate.version = version_of(repo, cfg.model, loaded.path)
    return gate


def load_gate_version(
    cfg: GateConfig, repo: ModelRepository, version: int, path: Path
) -> RelevanceGate:
    """Version `version` of the repository gate (its checked file at `path`); ModelLoadError
    when it cannot serve."""
    from strata.shared.models.repository import check_io

    manifest = repo.manifest(cfg.model, version)
    runner = create_runner(path, threads=cfg.threads)
    try:
        check_io(manifest, runner.inputs, runner.outputs)
        gate = _wrap(cfg, manifest, runner)
    except GateLoadError as exc:
        raise ModelLoadError(str(exc)) from None
    except ModelLoadError:
        runner.close()
        raise
    gate.version = version
    return gate


def _wrap(cfg: GateConfig, m: Manifest, runner: ModelRunner) -> RelevanceGate:
    if m.task != "classify":
        runner.close()
        raise GateLoadError(f"gate model {cfg.model!r} is a {m.task} model, not classify")
    spec = GateInput(
        height=m.input.height,
        width=m.input.width,
        rgb=m.input.colour == "RGB",
        scale=m.input.scale,
        mean=m.input.mean,
        std=m.input.std,
        output="probabilities" if m.output.format == "probabilities" else "logits",
    )
    if not m.source.trained:
        log.warning("gate model %r has untrained weights: its decisions are arbitrary", m.name)
    try:
        return RelevanceGate(runner, cfg, spec, name=m.name)
    except GateLoadError:
        runner.close()
        raise


def _spec_from_runner(runner: ModelRunner) -> GateInput:
    if len(runner.inputs) != 1 or len(runner.inputs[0].shape) != 4:
        raise GateLoadError("gate model needs one NCHW image input")
    _, c, h, w = runner.inputs[0].shape
    if c not in (None, 3):
        raise GateLoadError(f"gate model input has {c} channels, not 3")
    return GateInput(height=h or 224, width=w or 224)
