"""Appearance embeddings of people's crops (OSNet x0.25), for the tracker and the uplink.

`Embedder` runs the repository's embedding model (`edge.appearance.model`, the starter
`osnet_x0_25_msmt17`) on OpenVINO (one crop a call, a static shape: 4x ONNX Runtime's speed
on CPU) or ONNX Runtime CPU (batches of `edge.appearance.batch`), `edge.appearance.backend`:
each box's crop from the decoded frame, stretched to the model's input (256x128), RGB,
normalised as its manifest says; outputs L2-normalised. The tracker asks only for the boxes that
need one (edge/tracking/reid.py), `crops_per_frame` on average: the rest are counted
(`skipped`), never silently dropped.

`to_proto` / `from_proto`: the contract's `Appearance` (float16, little-endian); a vector of
the wrong size is refused with the size expected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from strata.shared.config.appearance import AppearanceConfig
from strata.shared.contracts import events_pb2
from strata.shared.runtime.base import ModelRunner
from strata.shared.vision import FrameBoxes

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)


class AppearanceError(ValueError):
    """Appearance cannot run as configured; the message says the fix."""


@dataclass(frozen=True, slots=True)
class Preprocess:
    """What the embedding model expects of a crop."""

    width: int = 128
    height: int = 256
    rgb: bool = True
    scale: float = 1.0 / 255
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)


class Embedder:
    """The embedding model and its crop preparation. Not thread-safe (one worker calls it)."""

    def __init__(self, cfg: AppearanceConfig, repository: str | Path | None = None) -> None:
        self.cfg = cfg
        self.backend = resolve_backend(cfg.backend)
        self.runner, self.pre, self.model_name = _open(cfg, self.backend, repository)
        # A runner compiled for a fixed batch (OpenVINO's static one) takes exactly that.
        self.chunk = int(getattr(self.runner, "fixed_batch", None) or cfg.batch)
        self.crops = 0  # crops embedded
        self.calls = 0
        self.seconds = 0.0
        self.skipped = 0  # crops over max_crops a frame, not embedded

    @property
    def dim(self) -> int:
        return self.cfg.dim

    def embed(self, image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """Embeddings (k, dim), L2-normalised, of `boxes` (k, 4) in `image`'s pixels (BGR)."""
        k = int(boxes.shape[0])
        out = np.zeros((k, self.dim), np.float32)
        if k == 0:
            return out
        t0 = time.perf_counter()
        pre = self.pre
        batch = np.empty((min(k, self.chunk), 3, pre.height, pre.width), np.float32)
        for start in range(0, k, self.chunk):
            part = boxes[start : start + self.chunk]
            n = int(part.shape[0])
            for i, box in enumerate(part):
                _crop_into(image, box, pre, batch[i])
            got = self.runner.run(batch[:n])[0]
            if got.ndim != 2 or got.shape[1] != self.dim:
                raise AppearanceError(
                    f"appearance model {self.model_name} gave embeddings of shape "
                    f"{tuple(got.shape)}, edge.appearance.dim says {self.dim}: set dim to the "
                    "model's output size or use a model that gives it"
                )
            out[start : start + n] = got
            self.calls += 1
        norm = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norm, 1e-12)
        self.crops += k
        self.seconds += time.perf_counter() - t0
        return out

    def close(self) -> None:
        self.runner.close()


def resolve_backend(backend: str) -> str:
    """`auto` as openvino when its package is installed, else onnxruntime-cpu."""
    if backend != "auto":
        return backend
    import importlib.util

    if importlib.util.find_spec("openvino"):
        return "openvino"
    log.warning(
        "appearance: openvino is not installed, embedding on ONNX Runtime: a crop costs about "
        "4x as much there (edge.appearance.crops_per_frame is sized for OpenVINO); install "
        "it with pip install 'strata[openvino]'"
    )
    return "onnxruntime-cpu"


def _options(cfg: AppearanceConfig, backend: str) -> dict[str, Any]:
    """The runner's options: OpenVINO one stream, one crop a call (a static batch of one
    ran 25% faster than its dynamic batch on one thread)."""
    if backend == "openvino":
        from strata.shared.runtime import OpenVinoOptions

        ov = OpenVinoOptions(threads=cfg.threads, streams=1, batch=1)
        return {"options": ov, "allocate": False}
    return {"threads": cfg.threads} if cfg.threads else {}


def _open(
    cfg: AppearanceConfig, backend: str, repository: str | Path | None
) -> tuple[ModelRunner, Preprocess, str]:
    """The runner, preprocessing and name of the configured model; AppearanceError says
    what to fix when it is missing or not an embedding model."""
    from strata.shared.models import ModelError, ModelRepository
    from strata.shared.runtime import ModelLoadError, create_runner

    options = _options(cfg, backend)
    if cfg.path:
        if not Path(cfg.path).is_file():
            raise AppearanceError(
                f"edge.appearance.path {cfg.path} is not a file: point it at an ONNX embedding "
                "model, or leave it empty for the repository's model (edge.appearance.model)"
            )
        try:
            runner = create_runner(cfg.path, backend, **options)
        except ModelLoadError as exc:
            raise AppearanceError(f"edge.appearance.path {cfg.path}: {exc}") from exc
        return runner, Preprocess(), Path(cfg.path).stem
    try:
        repo = ModelRepository(repository or None)
        if cfg.model not in repo.names():
            from strata.shared.models import starter_repository

            repo = ModelRepository(starter_repository())
        loaded = repo.open(cfg.model, backend, **options)
    except ModelError as exc:
        raise AppearanceError(
            f"appearance model {cfg.model!r} cannot be used ({exc}): put it in the model "
            "repository (models.repository), name another with edge.appearance.model, or turn "
            "appearance off (edge.appearance.enabled: false and no camera in "
            "edge.appearance.cameras)"
        ) from exc
    m = loaded.manifest
    if m.task != "embed":
        loaded.close()
        raise AppearanceError(
            f"model {cfg.model!r} is a {m.task} model, not an embedding one: name an embed "
            "model (e.g. osnet_x0_25_msmt17) in edge.appearance.model"
        )
    inp = m.input
    mean = tuple(inp.mean) if inp.mean else (0.0, 0.0, 0.0)
    std = tuple(inp.std) if inp.std else (1.0, 1.0, 1.0)
    pre = Preprocess(
        width=int(inp.shape[3] or 128),
        height=int(inp.shape[2] or 256),
        rgb=inp.colour == "RGB",
        scale=float(inp.scale),
        mean=(float(mean[0]), float(mean[1]), float(mean[2])),
        std=(float(std[0]), float(std[1]), float(std[2])),
    )
    return loaded.runner, pre, cfg.model


def _crop_into(image: np.ndarray, box: np.ndarray, pre: Preprocess, out: np.ndarray) -> None:
    """One box's crop written into `out`, the model's (3, height, width) input: stretched,
    channels in the model's order, scaled and normalised in place (no float copy of it)."""
    import cv2

    h, w = image.shape[:2]
    x1 = int(np.clip(np.floor(box[0]), 0, w - 1))
    y1 = int(np.clip(np.floor(box[1]), 0, h - 1))
    x2 = int(np.clip(np.ceil(box[2]), x1 + 1, w))
    y2 = int(np.clip(np.ceil(box[3]), y1 + 1, h))
    crop = cv2.resize(image[y1:y2, x1:x2], (pre.width, pre.height), interpolation=cv2.INTER_LINEAR)
    for c in range(3):
        # (x * scale - mean) / std as one multiply and one subtract per channel.
        np.multiply(crop[:, :, 2 - c if pre.rgb else c], pre.scale / pre.std[c], out=out[c])
        np.subtract(out[c], pre.mean[c] / pre.std[c], out=out[c])


def to_proto(vector: np.ndarray, samples: int, model: str) -> events_pb2.Appearance:
    """A track's embedding as the contract carries it: L2-normalised float16, little-endian."""
    v = np.asarray(vector, np.float32).reshape(-1)
    v = v / max(float(np.linalg.norm(v)), 1e-12)
    return events_pb2.Appearance(
        model=model, dim=int(v.shape[0]), float16=v.astype("<f2").tobytes(), samples=samples
    )


def from_proto(msg: events_pb2.Appearance, dim: int | None = None) -> np.ndarray:
    """The embedding of `msg` (float32, L2-normalised); ValueError on a wrong size."""
    n = len(msg.float16)
    if n != 2 * msg.dim or msg.dim == 0:
        raise ValueError(
            f"appearance of {n} bytes does not hold dim={msg.dim} float16 values "
            f"(needs {2 * msg.dim}): the sender's embedding is malformed"
        )
    if dim is not None and msg.dim != dim:
        raise ValueError(
            f"appearance of dim {msg.dim} from model {msg.model!r}, expected {dim}: the "
            "cameras' edges must use the same embedding model"
        )
    v = np.frombuffer(msg.float16, "<f2").astype(np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)


class Appearance:
    """Appearance for a node: the settings, the embedder (one for all cameras: the worker
    thread is its only caller) and the class ids embedded (edge.appearance.labels)."""

    def __init__(
        self, cfg: AppearanceConfig, embedder: Embedder, classes: frozenset[int] | None
    ) -> None:
        self.cfg = cfg
        self.embedder = embedder
        self.classes = classes

    @classmethod
    def for_node(
        cls, cfg: AppearanceConfig, labels: tuple[str, ...], repository: str | None = None
    ) -> Appearance | None:
        """None when no camera has appearance on; AppearanceError when the model cannot
        be used or its labels are not the detector's."""
        if not cfg.enabled and not any(cfg.cameras.values()):
            return None
        missing = [x for x in cfg.labels if labels and x not in labels]
        if missing:
            raise AppearanceError(
                f"edge.appearance.labels {missing} are not the detector's labels: name labels "
                "it has (e.g. person)"
            )
        classes = frozenset(labels.index(x) for x in cfg.labels) if labels else None
        embedder = Embedder(cfg, repository)
        on = sorted(c for c, v in cfg.cameras.items() if v)
        log.info(
            "appearance (%s) on for %s%s",
            embedder.model_name,
            "every camera" if cfg.enabled else "camera(s) ",
            "" if cfg.enabled else ", ".join(on),
        )
        return cls(cfg, embedder, classes)

    def embed_fn(
        self, image: np.ndarray | None, boxes: FrameBoxes, source: tuple[int, int]
    ) -> Callable[[np.ndarray], np.ndarray] | None:
        """The tracker's `embed` for one frame: crops of detections (source pixels) cut
        from `image` (its own scale); None without an image."""
        if image is None:
            return None
        sx = image.shape[1] / max(source[0], 1)
        sy = image.shape[0] / max(source[1], 1)
        scale = np.array([sx, sy, sx, sy], np.float32)

        def embed(idx: np.ndarray) -> np.ndarray:
            return self.embedder.embed(image, boxes.boxes[idx] * scale)

        return embed

    def message(self, vector: np.ndarray, samples: int) -> events_pb2.Appearance:
        """A track's embedding as its events carry it."""
        return to_proto(vector, samples, self.embedder.model_name)

    def close(self) -> None:
        self.embedder.close()


class AppearanceCollector:
    """Appearance's figures on /metrics: crops embedded and their time, crops skipped over
    the budget (the cost bound's drops), lost tracks re-linked, tracks with an embedding."""

    def __init__(self, appearance: Appearance, looks: Callable[[], tuple[int, int, int]]) -> None:
        self.appearance = appearance
        self.looks = looks

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        e = self.appearance.embedder
        skipped, relinked, tracks = self.looks()
        yield CounterMetricFamily(
            "strata_edge_appearance_crops", "Crops embedded (edge.appearance).", value=e.crops
        )
        yield CounterMetricFamily(
            "strata_edge_appearance_seconds",
            "Time spent embedding crops (crop, resize, model).",
            value=e.seconds,
        )
        yield CounterMetricFamily(
            "strata_edge_appearance_skipped",
            "Crops that needed an embedding but were over the budget "
            "(edge.appearance.crops_per_frame, max_crops).",
            value=skipped,
        )
        yield CounterMetricFamily(
            "strata_edge_appearance_relinked",
            "Lost tracks re-linked to a detection by appearance.",
            value=relinked,
        )
        yield GaugeMetricFamily(
            "strata_edge_appearance_tracks", "Live tracks with an embedding.", value=tracks
        )
