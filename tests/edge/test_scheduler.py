"""Batching policies: the reward, bounded exploration, and the learned policy in a real node."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.build import build_node
from strata.edge.inference.scheduler import QLearningPolicy, RulePolicy, WindowStats, reward
from strata.shared.config.edge import EdgeConfig, SchedulerConfig
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(120)


def stats(depth: int = 0, arrived: int = 10, answered: int = 10, r: float = 0.5) -> WindowStats:
    return WindowStats(1.0, arrived, answered, 0, depth, 32, 0.2, 2.0, 0.1, r)


def test_reward_rewards_throughput_and_punishes_p99_and_energy() -> None:
    base = reward(10, 10, 0.5, 1.0, 0.5)
    assert reward(10, 5, 0.5, 1.0, 0.5) < base  # fewer answered
    assert reward(10, 10, 1.5, 1.0, 0.5) < base  # p99 over the SLA
    assert reward(10, 10, 0.5, 1.0, 1.0) < base  # more energy per frame
    assert reward(10, 10, 0.5, 1.0, 0.5) == pytest.approx(0.6 + 0.3 * 0.5 - 0.1 * 0.5)


def test_exploration_only_tries_neighbouring_actions() -> None:
    cfg = SchedulerConfig(policy="learned", epsilon=1.0, epsilon_min=1.0, seed=3)
    p = QLearningPolicy(cfg, 8, 0.01)
    for _ in range(200):
        before = p.actions.index(p.current())
        # Reward 0 keeps every Q at 0: the greedy action is the one in force.
        after = p.actions.index(p.on_window(stats(r=0.0)))
        b0, d0 = divmod(before, 3)
        b1, d1 = divmod(after, 3)
        assert abs(b0 - b1) + abs(d0 - d1) <= 1
    assert p.explored == 200


def test_greedy_follows_the_reward_and_a_table_round_trips(tmp_path: Path) -> None:
    cfg = SchedulerConfig(policy="learned", epsilon=0.0, epsilon_min=0.0)
    p = QLearningPolicy(cfg, 8, 0.01)
    good = p.actions.index(p.current())
    for _ in range(20):
        p.on_window(stats(r=1.0))
    assert p.actions.index(p.current()) == good
    p.save(tmp_path / "q.json")
    q = QLearningPolicy(cfg, 8, 0.01)
    assert q.load(tmp_path / "q.json") and (q.q == p.q).all()
    # Another action set: refused, logged, learning from scratch.
    other = QLearningPolicy(cfg.model_copy(update={"batch_choices": [1, 2]}), 8, 0.01)
    assert not other.load(tmp_path / "q.json")
    (tmp_path / "bad.json").write_text("{not json")
    assert not q.load(tmp_path / "bad.json")
    assert json.loads((tmp_path / "q.json").read_text())["version"] == 1


def test_rule_policy_is_todays_rule() -> None:
    r = RulePolicy(8, 1, 0.1, 2, 0.01)
    r.on_batch([0.5])
    r.on_batch([0.5])
    assert r.current().max_batch == 4 and r.current().max_delay_s == 0.01


def test_a_real_node_runs_the_learned_policy_and_saves_its_table(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip, tmp_path: Path
) -> None:
    q = tmp_path / "q.json"
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4, "queue_per_camera": 64, "delay_target_ms": 60000},
            # Credits for the whole burst: a BUSY answer (credit of 4 under load) would leave
            # frames unpublished (the agent here does not resend).
            "flow": {"initial_credits": 64},
            "scheduler": {"policy": "learned", "decide_every_s": 0.1, "q_table": str(q)},
        }
    )
    node = build_node(cfg, colour_model, "colour")
    node.start()
    reg = node.metrics.registry
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        n = 60
        for i in range(n):
            agent.send_image(f"cam{i % 3}", 1000 + i, synthetic_clip.frame(i % 10).image)
            time.sleep(0.01)
        got = sub.collect(n, timeout_s=60)
        assert len(got) == n
        deadline = time.monotonic() + 10
        while sample(reg, "strata_edge_scheduler_decisions_total", {"policy": "learned"}) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert node.scheduler.current() in node.scheduler.actions  # type: ignore[attr-defined]
    finally:
        node.stop()
    assert QLearningPolicy(cfg.scheduler, 4, 0.01).load(q)


def test_deadline_shedding_sheds_what_would_miss_the_sla_and_accounts_every_frame(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    from strata.shared.contracts import frame_pb2

    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {
                "max_batch": 1,
                "max_queue_delay_ms": 0,
                "queue_per_camera": 64,
                "delay_target_ms": 60000,
            },
            "flow": {"initial_credits": 64},
            "overload": {"gpu_pressure": {"enabled": False}, "deadline": {"enabled": True}},
            # A 10 ms SLA: a burst of 60 one-frame batches cannot all make it.
            "scheduler": {"sla_ms": 10.0},
        }
    )
    node = build_node(cfg, colour_model, "colour")
    node.start()
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        n = 60
        image = synthetic_clip.frame(3).image
        for i in range(n):
            agent.send_image("cam", 1000 + i, image)
        final: dict[int, frame_pb2.FrameAck] = {}
        deadline = time.monotonic() + 30
        while len(final) < n and time.monotonic() < deadline:
            for ack in agent.acks(1, timeout_s=0.5):
                if ack.camera_id == "cam" and ack.status != frame_pb2.ACK_STATUS_QUEUED:
                    final[ack.sequence] = ack
        assert len(final) == n  # every frame has its final answer
        shed = [a for a in final.values() if a.status == frame_pb2.ACK_STATUS_SHED]
        done = [a for a in final.values() if a.status == frame_pb2.ACK_STATUS_PROCESSED]
        assert len(shed) + len(done) == n and shed
        assert all(a.reason.startswith("deadline:") for a in shed)
        results = [r for r in sub.collect(len(done) + 1, timeout_s=3) if r.camera_id == "cam"]
        assert sorted(r.sequence for r in results) == sorted(a.sequence for a in done)
        reg = node.metrics.registry
        assert sample(reg, "strata_edge_frames_total", {"status": "shed"}) == len(shed)
    finally:
        node.stop()
