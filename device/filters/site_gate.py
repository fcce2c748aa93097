"""The relevance gate that knows the site: a frozen ImageNet MobileNetV3-Small backbone (ONNX
Runtime) whose pooled features feed one small head per camera, learned online from the
edge's answers (device/filters/site_head.py).

The backbone is the starter repository's `mobilenetv3_small_imagenet` (Keras weights,
Apache-2.0; shared/starter_models/mobilenetv3_small_imagenet/MODEL_CARD.md), verified by its
manifest's checksum, then cut in memory (onnx.utils.Extractor) at the output of its global
average pool: the graph's last ReduceMean (or GlobalAveragePool) node, [N, 576, 1, 1], the
input of the classifier's 1x1 convolutions. The classifier is never run. The cut graph's
batch axis is made dynamic (everything before the pool is convolutions), so a gate batch
is one run.

Per camera (`SiteGate`): every frame that reaches the gate is embedded; one in
`holdout_every` is a held-out probe (always kept, never trained on); the others are
dropped when the gate is switched on and the head's P(object) is under `drop_below`. The
edge's final ack of a kept frame carries `objects` (the boxes it published for the frame):
its features, remembered by frame index, train the head or score the probe. The gate
switches on when the probes' rolling recall of object frames passes (site_head.Agreement),
and off as soon as it no longer does; each switch is logged and counted.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from strata.shared.config.device import GateConfig, SiteGateConfig

from .site_head import (
    GATE_STATES,
    Agreement,
    HeadSettings,
    HeldOut,
    OnlineHead,
    fmt_share,
    gate_state,
    is_probe,
)

log = logging.getLogger(__name__)

# Frames kept for a camera whose answers have not come yet; older ones are forgotten.
_PENDING = 512


class BackboneError(RuntimeError):
    """The backbone cannot be loaded or cut."""


def cut_at_pool(model: Any) -> Any:
    """The ModelProto `model` cut at its last global average pool (a ReduceMean over H, W
    or a GlobalAveragePool), batch axis dynamic. BackboneError when there is none."""
    import onnx
    from onnx.utils import Extractor

    pools = [n for n in model.graph.node if n.op_type in ("ReduceMean", "GlobalAveragePool")]
    if not pools:
        raise BackboneError("no global average pool in the graph: not a pooled backbone")
    pooled = pools[-1].output[0]
    inputs = [i.name for i in model.graph.input]
    # The extractor needs every tensor's shape: inferred first.
    cut = Extractor(onnx.shape_inference.infer_shapes(model)).extract_model(inputs, [pooled])
    # Intermediate shapes were inferred for a batch of one: dropped, ORT infers its own.
    cut.graph.ClearField("value_info")
    for value in (*cut.graph.input, *cut.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "N"
    onnx.checker.check_model(cut)
    return cut


class Backbone:
    """The frozen backbone: BGR images -> pooled features (n, dim) float32."""

    def __init__(self, model_path: Path, size: int = 224, threads: int = 1) -> None:
        import onnx
        import onnxruntime as ort

        try:
            cut = cut_at_pool(onnx.load(str(model_path)))
        except BackboneError:
            raise
        except Exception as exc:
            raise BackboneError(f"cannot read {model_path}: {exc}") from None
        opts = ort.SessionOptions()
        if threads > 0:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            cut.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        self._input = self.session.get_inputs()[0].name
        self.size = size
        self.dim = int(cut.graph.output[0].type.tensor_type.shape.dim[1].dim_value)

    def embed(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Pooled features of BGR images (RGB 0-255 in: the Keras model rescales inside)."""
        if not images:
            return np.empty((0, self.dim), np.float32)
        batch = np.empty((len(images), 3, self.size, self.size), np.float32)
        for i, image in enumerate(images):
            small = cv2.resize(image, (self.size, self.size), interpolation=cv2.INTER_AREA)
            rgb = cv2.cvtColor(small, cv2.COLOR_BGR2RGB)
            batch[i] = rgb.transpose(2, 0, 1)
        out = self.session.run(None, {self._input: batch})[0]
        return np.asarray(out, np.float32).reshape(len(images), -1)

    def close(self) -> None:
        """Release the session."""
        del self.session


def load_backbone(model: str, repository: str = "", threads: int = 1) -> Backbone:
    """The backbone `model` of the repository (else the starter's), checksum verified."""
    from strata.shared.models import repository_for

    try:
        repo = repository_for(repository, model, "device.gate.site.model")
        manifest, _, path = repo.file_of(model)
    except Exception as exc:  # ModelError: one clear line that says the fix
        raise BackboneError(f"site gate backbone {model!r}: {exc}") from None
    return Backbone(path, size=manifest.input.height, threads=threads)


def head_settings(cfg: SiteGateConfig) -> HeadSettings:
    """The head's settings from `device.gate.site`."""
    return HeadSettings(
        learning_rate=cfg.learning_rate,
        drop_below=cfg.drop_below,
        holdout_every=cfg.holdout_every,
        window=cfg.window,
        min_recall=cfg.min_recall,
        min_positives=cfg.min_positives,
        min_negatives=cfg.min_negatives,
        min_training=cfg.min_training,
    )


class SiteGateMetrics:
    """The site gate's metrics, per camera, on the agent's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        cam = ["camera"]
        self.samples = Counter(
            "strata_device_gate_site_training_samples",
            "Edge answers the site gate's head learned from.",
            cam,
            registry=registry,
        )
        self.probes = Counter(
            "strata_device_gate_site_probes",
            "Held-out probe frames (always sent, never trained on) the edge answered.",
            cam,
            registry=registry,
        )
        self.recall = Gauge(
            "strata_device_gate_site_recall",
            "Held-out agreement: share of object probes the head would keep (rolling window).",
            cam,
            registry=registry,
        )
        self.on = Gauge(
            "strata_device_gate_site_on",
            "1 while the site gate drops frames (its held-out agreement passes), else 0.",
            cam,
            registry=registry,
        )
        self.switches = Counter(
            "strata_device_gate_site_switches",
            "Times the site gate switched on or off.",
            ["camera", "to"],
            registry=registry,
        )
        self.state = Gauge(
            "strata_device_gate_site_state",
            "1 for the site gate's state: training (keeps every frame, short of the samples "
            "or probes its agreement needs), off (keeps every frame, its recall over object "
            "probes enough under min_recall), on (drops frames).",
            ["camera", "state"],
            registry=registry,
        )
        self.needs = Gauge(
            "strata_device_gate_site_needs",
            "What the site gate needs before it switches on (device.gate.site): recall, "
            "samples (min_training), object_probes (min_positives), empty_probes "
            "(min_negatives).",
            ["camera", "what"],
            registry=registry,
        )
        self.window = Gauge(
            "strata_device_gate_site_window_probes",
            "Answered held-out probes in the agreement's rolling window, by kind (object, empty).",
            ["camera", "kind"],
            registry=registry,
        )
        self.forgotten = Counter(
            "strata_device_gate_site_unanswered",
            "Kept frames whose answer never came before the gate forgot them.",
            cam,
            registry=registry,
        )


@dataclass
class _Pending:
    features: np.ndarray
    probe: bool
    kept_by_head: bool


@dataclass(frozen=True, slots=True)
class SiteStatus:
    """One camera's site gate, for status lines and the console."""

    camera_id: str
    on: bool
    samples: int
    positives: int
    negatives: int
    recall: float | None
    dropped_share: float | None
    # A GATE_STATES entry (site_head.gate_state).
    state: str = "training"

    def line(self) -> str:
        """`site gate on: recall 0.990 over 60 object probes, 412 samples`."""
        state = "on" if self.on else f"{self.state} (keeps every frame)"
        return (
            f"site gate {state}: held-out recall {fmt_share(self.recall)} over "
            f"{self.positives} object / {self.negatives} empty probes, "
            f"{self.samples} training samples"
        )


@dataclass
class _Camera:
    head: OnlineHead
    held_out: HeldOut
    pending: OrderedDict[int, _Pending] = field(default_factory=OrderedDict)
    on: bool = False


class SiteGate:
    """Per-camera heads over one backbone's features; thread-safe (`decide` runs on the
    gate worker's thread, `answer` on the sender's)."""

    def __init__(
        self, dim: int, settings: HeadSettings, metrics: SiteGateMetrics | None = None
    ) -> None:
        self.dim = dim
        self.s = settings
        self.metrics = metrics
        self._cams: dict[str, _Camera] = {}
        self._lock = threading.Lock()

    def _cam(self, camera_id: str) -> _Camera:
        cam = self._cams.get(camera_id)
        if cam is None:
            cam = self._cams[camera_id] = _Camera(
                OnlineHead(self.dim, self.s), HeldOut(self.s.window)
            )
            self._publish(camera_id, cam, cam.held_out.agreement(), first=True)
        return cam

    def _publish(self, camera_id: str, cam: _Camera, a: Agreement, first: bool = False) -> None:
        """The camera's state, agreement and window on the metrics (the console reads them)."""
        m = self.metrics
        if m is None:
            return
        state = gate_state(cam.on, cam.head.samples, a, self.s)
        for name in GATE_STATES:
            m.state.labels(camera_id, name).set(int(name == state))
        m.window.labels(camera_id, "object").set(a.positives)
        m.window.labels(camera_id, "empty").set(a.negatives)
        if a.recall is not None:
            m.recall.labels(camera_id).set(a.recall)
        if first:
            m.on.labels(camera_id).set(0)
            m.samples.labels(camera_id)
            needs = (
                ("recall", self.s.min_recall),
                ("samples", self.s.min_training),
                ("object_probes", self.s.min_positives),
                ("empty_probes", self.s.min_negatives),
            )
            for what, value in needs:
                m.needs.labels(camera_id, what).set(value)

    def decide(self, camera_id: str, indices: Sequence[int], features: np.ndarray) -> np.ndarray:
        """Keep mask for a camera's frames (their frame indices and features); remembers
        every kept frame's features for its answer."""
        keep = np.ones(len(indices), bool)
        with self._lock:
            cam = self._cam(camera_id)
            p = cam.head.probability(features)
            for i, index in enumerate(indices):
                probe = is_probe(int(index), self.s.holdout_every)
                head_keeps = bool(p[i] >= self.s.drop_below)
                if cam.on and not probe and not head_keeps:
                    keep[i] = False
                    continue
                cam.pending[int(index)] = _Pending(features[i], probe, head_keeps)
                while len(cam.pending) > _PENDING:
                    cam.pending.popitem(last=False)
                    if self.metrics is not None:
                        self.metrics.forgotten.labels(camera_id).inc()
        return keep

    def answer(self, camera_id: str, frame_index: int, objects: int) -> None:
        """The edge's answer for a kept frame: `objects` boxes published for it."""
        with self._lock:
            cam = self._cams.get(camera_id)
            if cam is None:
                return
            pending = cam.pending.pop(int(frame_index), None)
            if pending is None:
                return
            positive = objects > 0
            m = self.metrics
            if pending.probe:
                cam.held_out.add(pending.kept_by_head, positive)
                if m is not None:
                    m.probes.labels(camera_id).inc()
            else:
                cam.head.learn(pending.features, positive)
                if m is not None:
                    m.samples.labels(camera_id).inc()
            self._switch(camera_id, cam)

    def _switch(self, camera_id: str, cam: _Camera) -> None:
        a = cam.held_out.agreement()
        passes = a.passes(self.s) and cam.head.samples >= self.s.min_training
        m = self.metrics
        changed = passes != cam.on
        cam.on = passes
        self._publish(camera_id, cam, a)
        if not changed:
            return
        if m is not None:
            m.on.labels(camera_id).set(int(passes))
            m.switches.labels(camera_id, "on" if passes else "off").inc()
        log.info(
            "camera %s: %s",
            camera_id,
            self._status(camera_id, cam, a).line()
            + ("" if passes else f" (needs recall >= {self.s.min_recall:g})"),
        )

    def _status(self, camera_id: str, cam: _Camera, a: Agreement) -> SiteStatus:
        return SiteStatus(
            camera_id,
            cam.on,
            cam.head.samples,
            a.positives,
            a.negatives,
            a.recall,
            a.dropped_share,
            gate_state(cam.on, cam.head.samples, a, self.s),
        )

    def status(self, camera_id: str) -> SiteStatus | None:
        """The camera's gate now (None: no frame of it seen yet)."""
        with self._lock:
            cam = self._cams.get(camera_id)
            if cam is None:
                return None
            return self._status(camera_id, cam, cam.held_out.agreement())

    def is_on(self, camera_id: str) -> bool:
        """Whether the camera's gate drops frames now."""
        with self._lock:
            cam = self._cams.get(camera_id)
            return cam is not None and cam.on


@dataclass(frozen=True, slots=True)
class SiteRoute:
    """What the gate worker runs for the site gate: the backbone and the per-camera heads."""

    backbone: Backbone
    gate: SiteGate

    def keep(
        self, cameras: Sequence[str], indices: Sequence[int], images: Sequence[np.ndarray]
    ) -> np.ndarray:
        """Keep mask of a batch of frames of any cameras (one backbone run)."""
        feats = self.backbone.embed(images)
        keep = np.ones(len(images), bool)
        by_cam: dict[str, list[int]] = {}
        for row, cam in enumerate(cameras):
            by_cam.setdefault(cam, []).append(row)
        for cam, rows in by_cam.items():
            keep[rows] = self.gate.decide(cam, [indices[r] for r in rows], feats[rows])
        return keep

    def close(self) -> None:
        """Release the backbone."""
        self.backbone.close()


def site_route(cfg: GateConfig, repository: str, registry: CollectorRegistry) -> SiteRoute | None:
    """The site gate of `device.gate` (None when off); BackboneError says what is wrong."""
    if not (cfg.enabled and cfg.site.enabled):
        return None
    backbone = load_backbone(cfg.site.model, repository, cfg.threads)
    gate = SiteGate(backbone.dim, head_settings(cfg.site), SiteGateMetrics(registry))
    log.info(
        "site gate: %s cut at its pool (%d features); keeps every frame until its held-out "
        "recall of object frames reaches %g",
        cfg.site.model,
        backbone.dim,
        cfg.site.min_recall,
    )
    return SiteRoute(backbone, gate)
