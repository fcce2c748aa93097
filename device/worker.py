"""The relevance gate's worker: one thread batching frames across cameras, where the gate
can drop frames (its threshold above 0).

It takes batches from the gate inbox round-robin over cameras, converts them to BGR at the
payload size (each camera's pipeline's scaler), runs the relevance gate, and hands each
frame it keeps, in order with the header-only notices of dropped frames, to its camera's
pipeline to be encoded and submitted (device/pipeline.py: on this thread, no further
hop). A gate that cannot drop is never run: its cameras' frames never come here, and this
thread only serves the gate's version switches.

If the gate itself fails on a batch, the frames are sent ungated (and logged): a broken
gate must not silently eat frames.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from strata.shared.config.device import CascadeConfig, GateConfig

from .filters.gate import RelevanceGate
from .filters.inbox import GateInbox, GateItem
from .filters.site_gate import SiteRoute
from .filters.versions import GateSwitcher
from .metrics import CameraMetrics, DeviceMetrics, DropLog
from .pipeline import CameraPipeline

log = logging.getLogger(__name__)

# The one decision a gate that cannot drop makes, for the canary's memory.
_KEEP_ONE = np.ones(1, bool)


@dataclass(frozen=True, slots=True)
class _Gated:
    """What the gate made of one frame: its image (None: send the dropped frame's notice)
    and its score."""

    item: GateItem
    image: np.ndarray | None
    gate_score: float


@dataclass(frozen=True, slots=True)
class GateSetup:
    """What the gate worker is built with besides its collaborators: the device config's
    sections it reads."""

    gate: GateConfig = field(default_factory=GateConfig)
    cascade: CascadeConfig | None = None
    # The gate that learns the site (device/filters/site_gate.py): replaces `gate` when set.
    site: SiteRoute | None = None


class GateWorker:
    """Inbox -> BGR -> relevance gate -> each camera's pipeline.

    `gate` None: every frame passes ungated. `switcher`: run-time gate versions
    (device/filters/versions.py), swapped in between two batches on this worker's thread.
    """

    def __init__(
        self,
        inbox: GateInbox,
        metrics: DeviceMetrics,
        setup: GateSetup,
        gate: RelevanceGate | None = None,
        switcher: GateSwitcher | None = None,
    ) -> None:
        self.inbox = inbox
        self.gate = gate
        self.gate_cfg = setup.gate
        self.metrics = metrics
        # Dropped frames travel as header-only messages when the cascade says so.
        cascade = setup.cascade
        self.send_skipped = cascade is not None and cascade.enabled and cascade.send_skipped
        self.switcher = switcher
        self.site = setup.site
        self._cams: dict[str, tuple[CameraMetrics, DropLog, CameraPipeline]] = {}
        self._finish = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gate", daemon=True)
        self.batches = 0

    @property
    def gating(self) -> bool:
        """The gate runs: frames go through this worker (fixed for the agent's life: a
        new version keeps the configured threshold)."""
        return self.site is not None or (self.gate is not None and self.gate.can_drop)

    @property
    def needed(self) -> bool:
        """This worker has a thread's work: gating, or a version switch to watch."""
        return self.gating or self.switcher is not None

    def add_camera(self, camera_id: str, pipeline: CameraPipeline) -> None:
        """Register a camera's metrics, drop log and pipeline."""
        self._cams[camera_id] = (
            self.metrics.camera(camera_id),
            DropLog(log, camera_id, "relevance gate dropped"),
            pipeline,
        )

    def passed(self, image: np.ndarray | bytes) -> None:
        """A frame that went ungated past a gate that cannot drop (a camera's thread), as
        BGR or as its JPEG: the canary of a new gate version still needs recent frames."""
        if self.switcher is not None and self.gate is not None:
            self.switcher.remember([image], self.gate, _KEEP_ONE)

    def start(self) -> None:
        """Start the worker's thread (only where it has work: `needed`)."""
        if self.gate is not None and not self.gate.can_drop:
            log.info(
                "relevance gate: threshold 0 keeps every frame, so its classifier is not run "
                "(set device.gate.threshold above 0 to gate)"
            )
        if self.needed:
            self._thread.start()

    def finish(self, timeout: float | None = None) -> bool:
        """Process what is queued, then stop; True when the thread has ended."""
        self._finish.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        done = not self._thread.is_alive()
        for _, drop_log, _ in self._cams.values():
            drop_log.flush()
        return done

    def _run(self) -> None:
        max_batch = self.gate_cfg.max_batch if self.gate or self.site else 64
        while True:
            if self.switcher is not None:
                self._maybe_switch(self.switcher)
            # Waiting for a batch to fill only pays for a classifier that runs.
            delay = self.gate_cfg.max_delay_ms / 1000.0 if self.gating else 0.0
            batch = self.inbox.take(max_batch, delay, timeout_s=0.05)
            if not batch:
                if self._finish.is_set() and len(self.inbox) == 0:
                    return
                if self.inbox.closed:  # take no longer waits: wait for finish instead
                    self._finish.wait(0.05)
                continue
            try:
                self._process(batch)
            except Exception:  # keep the agent alive; these frames are logged as lost
                log.exception("gate worker: %d frame(s) lost to an unexpected error", len(batch))

    def _maybe_switch(self, switcher: GateSwitcher) -> None:
        """Between two batches (this thread runs them all): serve a ready version."""
        switcher.poll()
        loaded = switcher.ready()
        if loaded is None or self.gate is None:
            return
        old, self.gate = self.gate, loaded.model
        switcher.switched(loaded, old.version)
        old.close()

    def _process(self, batch: list[GateItem]) -> None:
        # Frames are scaled to the edge model's input while converting out of the decoder
        # and gated together; dropped frames' messages keep their place in the order.
        frames = [item for item in batch if not item.skip_reason]
        images = [self._cams[item.camera_id][2].bgr(item) for item in frames]
        gated = iter(self._gate(frames, images) if frames else [])
        for item in batch:
            g = _Gated(item, None, 0.0) if item.skip_reason else next(gated)
            if g is not None:
                self._cams[item.camera_id][2].emit(g.item, g.image, g.gate_score)

    def _why(self, gate_score: float) -> str:
        if self.site is not None:
            return "the site gate's head: no moving object"
        return f"score {gate_score:.3f} < {self.gate_cfg.threshold:g}"

    def _site(
        self, batch: list[GateItem], images: list[np.ndarray]
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The site gate's keep mask (as scores 1/0); None, None (sent ungated, logged)
        when the backbone fails on the batch."""
        assert self.site is not None
        try:
            keep = self.site.keep([i.camera_id for i in batch], [i.index for i in batch], images)
        except Exception as exc:  # ORT errors are untyped
            log.error("site gate failed on a batch of %d, sent ungated: %s", len(batch), exc)
            return None, None
        finally:
            self.batches += 1
            self.metrics.gate_batch.observe(len(batch))
        return keep.astype(np.float32), keep

    def _gate(self, batch: list[GateItem], images: list[np.ndarray]) -> list[_Gated | None]:
        """Per frame: what its pipeline sends (a frame, a dropped frame's notice, None)."""
        out: list[_Gated | None] = []
        scores: np.ndarray | None = None
        keep: np.ndarray | None = None
        if self.site is not None:
            scores, keep = self._site(batch, images)
        elif self.gate is not None and not self.gate.can_drop:
            # Every frame passes (gate_score 1.0, as ungated); a canary still needs them.
            if self.switcher is not None:
                self.switcher.remember(images, self.gate, np.ones(len(images), bool))
        elif self.gate is not None:
            try:
                scores = self.gate.score(images)
                keep = self.gate.decide(scores)
                if self.switcher is not None:
                    self.switcher.remember(images, self.gate, keep)
            except Exception as exc:  # ORT errors are untyped
                log.error(
                    "relevance gate failed on a batch of %d, sent ungated: %s", len(batch), exc
                )
                scores = keep = None
            self.batches += 1
            self.metrics.gate_batch.observe(len(batch))
        now = time.monotonic()
        for i, item in enumerate(batch):
            m, drop_log, _ = self._cams[item.camera_id]
            gate_score = 1.0
            if scores is not None and keep is not None:
                m.gate_latency.observe(now - item.queued_at)
                gate_score = float(scores[i])
                # A scene change is kept: the edge must see the new scene to re-seed.
                if not keep[i] and not item.calibration and not item.scene_change:
                    m.dropped_gate.inc()
                    drop_log.add(1, self._why(gate_score))
                    if self.send_skipped:
                        item.skip_reason = "gate"
                        out.append(_Gated(item, None, gate_score))
                    else:
                        out.append(None)
                    continue
            out.append(_Gated(item, images[i], gate_score))
        return out
