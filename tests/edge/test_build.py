"""build_node: every stage built with its collaborators, and the seam after tracking.

A real node on loopback: a stage handed through `NodeOptions.after_tracking` sees every
detected frame's tracked result before publish, and what it returns is what goes out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.build import NodeOptions, build_node
from strata.edge.tracking.handoff import AnsweredFrame, TrackedFrame
from strata.shared.config.edge import EdgeConfig
from strata.shared.config.objects import ObjectsConfig, UntrackableLabelError
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision import FrameBoxes


def cfg() -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 2, "delay_target_ms": 60_000},
            "flow": {"initial_credits": 64},
        }
    )


def test_the_stages_share_their_collaborators(colour_model: Path) -> None:
    node = build_node(cfg(), colour_model, "colour")
    try:
        limits = node.delivery.credits.limits
        # The credits read the same policy and GPU pressure the worker batches by.
        assert limits.gpu is node.gpu_pressure and limits.policy is node.scheduler  # type: ignore[attr-defined]
        assert node.delivery.model_name == "colour"
        names = [p.name for p in node.checkpointer.parts]
        assert names == ["streams", "trackers", "counters", "uplink", "rules", "clip_demand"]
        # The rules stage runs first after tracking, and is the rules checkpoint part; the
        # clip demand follows it (it reads the rules' lifecycle events), its own part.
        after = node.stages.worker.s.after_tracking
        assert after[0] is node.rules is node.checkpointer.parts[4]
        assert after[1] is node.clip_demand is node.checkpointer.parts[5]
    finally:
        node.stop()


class DropBoxes:
    """A stage after tracking: records what it saw and publishes no boxes."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []

    def __call__(self, frame: TrackedFrame) -> TrackedFrame:
        h = frame.decoded.header
        self.seen.append((h.camera_id, h.sequence, len(frame.boxes)))
        return replace(frame, boxes=FrameBoxes.empty(), tracked=None)

    def answered(self, frame: AnsweredFrame) -> AnsweredFrame:
        return frame


def test_stages_after_tracking_see_each_frame_before_publish(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    stage = DropBoxes()
    node = build_node(cfg(), colour_model, "colour", NodeOptions(after_tracking=(stage,)))
    ep = node.start()
    try:
        sub = Listener(zctx, ep.publish, "cam")
        probe = Listener(zctx, ep.publish)
        agent = RawAgent(zctx, ep.listen)
        wait_until_subscribed(agent, probe, synthetic_clip.frame(0).image)
        with_objects = [i for i in range(len(synthetic_clip)) if len(synthetic_clip.boxes(i))]
        for seq, idx in enumerate(with_objects[:5], 1):
            agent.send_image("cam", seq, synthetic_clip.frame(idx).image, frame_index=idx)
        results = sub.collect(5)
        assert [r.sequence for r in results] == [1, 2, 3, 4, 5]
        seen = {s: n for c, s, n in stage.seen if c == "cam"}
        assert sorted(seen) == [1, 2, 3, 4, 5]
        assert sum(seen.values()) > 0  # the detector found the clip's objects ...
        assert all(len(r.detections) == 0 for r in results)  # ... the stage's answer went out
    finally:
        node.stop()


def test_objects_drop_untracked_labels_before_tracking_and_count_them(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # The colour detector knows person, car, bicycle; only person is tracked.
    objects = ObjectsConfig.model_validate({"track": ["person"]})
    stage = DropBoxes()
    node = build_node(
        cfg(), colour_model, "colour", NodeOptions(objects=objects, after_tracking=(stage,))
    )
    ep = node.start()
    try:
        sub = Listener(zctx, ep.publish, "cam")
        probe = Listener(zctx, ep.publish)
        agent = RawAgent(zctx, ep.listen)
        wait_until_subscribed(agent, probe, synthetic_clip.frame(0).image)
        # The colour detector gives one box per colour present in a frame.
        classes = [
            {b.class_id for b in synthetic_clip.boxes(i)} for i in range(len(synthetic_clip))
        ]
        with_others = [i for i, c in enumerate(classes) if c - {0}][:5]
        for seq, idx in enumerate(with_others, 1):
            agent.send_image("cam", seq, synthetic_clip.frame(idx).image, frame_index=idx)
        sub.collect(len(with_others))
        seen = sum(k for c, _s, k in stage.seen if c == "cam")
        assert seen == sum(0 in classes[i] for i in with_others)  # only persons reached tracking
        reg = node.metrics.registry
        dropped = {
            (s.labels["label"], s.labels["reason"]): s.value
            for m in reg.collect()
            if m.name == "strata_edge_label_drops"
            for s in m.samples
            if s.name.endswith("_total")
        }
        others = sum(len(classes[i] - {0}) for i in with_others)
        assert others > 0
        assert sum(v for (_l, r), v in dropped.items() if r == "untracked") == others
        assert {lab for lab, _r in dropped} <= {"car", "bicycle"}
    finally:
        node.stop()


def test_a_tracked_label_the_model_lacks_refuses_to_build(colour_model: Path) -> None:
    objects = ObjectsConfig.model_validate({"track": ["person", "dog"]})
    with pytest.raises(UntrackableLabelError, match="dog"):
        build_node(cfg(), colour_model, "colour", NodeOptions(objects=objects))


def test_appearance_on_a_camera_builds_and_bad_labels_refuse(colour_model: Path) -> None:
    """edge.appearance on for one camera: the cascade embeds and the rules stage hands the
    tracks' embeddings to their lifecycle events; labels the detector lacks refuse to build
    with the fix (and the model is closed again)."""
    from strata.edge.tracking.appearance import AppearanceError
    from strata.shared.config.appearance import AppearanceConfig

    on = AppearanceConfig(cameras={"door": True})
    node = build_node(cfg().model_copy(update={"appearance": on}), colour_model, "colour")
    try:
        assert node.stages.cascade.appearance is not None
        assert node.rules.appearance_of is not None
        assert node.rules.appearance_of(1, "door", 1) is None  # no such track yet
    finally:
        node.stop()
    bad = AppearanceConfig(enabled=True, labels=["dog"])  # the colour model has no dog
    with pytest.raises(AppearanceError, match="not the detector's labels"):
        build_node(cfg().model_copy(update={"appearance": bad}), colour_model, "colour")
