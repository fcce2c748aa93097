"""The real daemons (`strata cloud`, `strata edge` as processes): track events through a cloud
outage and a `kill -9` of the edge mid-track, restarted from its checkpoint. Each ended track
has exactly one end event in the cloud, every event the edge published is stored, and
copies only ever come with the same idempotency key (acked DUPLICATE).

The scene is the rules stage's (tests/edge/test_rules_stage.py): per cycle of 31 frames a
red person walks right and a green car drives left across the vertical line `door`; both
leave the frame at frame 26 and their tracks end. Four cycles, one after another."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version, events_pb2
from strata.tools.demo.scrape import scrape
from strata.tools.demo.stack import Stack
from test_rules_stage import RULES, SESSION, Camera, scene, subscribe

_CLOUD_TESTS = str(Path(__file__).resolve().parents[1] / "cloud")
if _CLOUD_TESTS not in sys.path:
    sys.path.append(_CLOUD_TESTS)

from cloud_models import LABELS, build_colour_classifier  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

E = events_pb2
CYCLE = 31
CYCLES = 4


def cloud_events(address: str) -> list[events_pb2.StoredTrackEvent]:
    channel = grpc.insecure_channel(address)
    try:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        req = analytics_pb2.QueryEventsRequest(version=current_version(), page_size=1000)
        return [ev for page in stub.QueryTrackEvents(req, timeout=10) for ev in page.events]
    finally:
        channel.close()


class Driver:
    """A raw agent's camera `cam` on the edge, one frame at a time, each waited for on the
    PUB socket (so the frames sent before a kill are all published)."""

    def __init__(self, zctx: Any, stack: Stack) -> None:
        self.sub = Listener(zctx, stack.publish_address)
        listen = f"tcp://127.0.0.1:{stack.ports.edge_listen}"
        subscribe(zctx, listen, self.sub)
        self.cam = Camera(RawAgent(zctx, listen, session_id=SESSION), "cam")

    def frames(self, first: int, last: int) -> None:
        for g in range(first, last):
            self.cam.send(g, scene(g % CYCLE))
            assert len(self.sub.collect(1, timeout_s=30)) == 1, f"no result for frame {g}"
        self.sub.collect(10**6, timeout_s=0.5)  # the last frames' events follow their results


@pytest.mark.parametrize(
    ("after_checkpoint", "on_events"),
    [
        pytest.param(2, True, id="fresh-checkpoint"),
        # Events emitted after the last timed checkpoint: checkpoint.on_events wrote the
        # state behind them before their frames were acked, so none is derived again.
        pytest.param(14, True, id="stale-checkpoint"),
        # Without it the journal answers the settled frames DUPLICATE, they are never
        # replayed, and the older rules state derives a crossing and an end again under
        # other keys: the test must see that.
        pytest.param(
            14,
            False,
            id="stale-checkpoint-without-on-events",
            marks=pytest.mark.xfail(strict=True, raises=AssertionError),
        ),
    ],
)
def test_kill_9_of_the_edge_and_a_cloud_outage_lose_no_track_event(
    colour_model: Path, zctx: Any, tmp_path: Path, after_checkpoint: int, on_events: bool
) -> None:
    # A checkpoint every `interval` s; the kill comes `after_checkpoint` frames after the
    # first one written during cycle 1 (the frames take far less than `interval`).
    interval = 0.5 if after_checkpoint <= 2 else 5.0
    models = tmp_path / "models"
    models.mkdir()
    (models / "labels.txt").write_text("\n".join(LABELS) + "\n")
    classifier = build_colour_classifier(models / "colour.onnx", size=32)
    stack = Stack(
        workdir=tmp_path / "run",
        cameras=[],
        extra_config={
            "logging": {"level": "INFO"},
            "cloud": {
                "model": {"path": str(classifier), "labels_file": str(models / "labels.txt")},
            },
            "edge": {
                "edge_id": "edge-a",
                "model": {"path": str(colour_model), "input_size": MODEL_SIZE},
                "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "delay_target_ms": 60_000},
                "flow": {"initial_credits": 64},
                "overload": {"gpu_pressure": {"enabled": False}},
                "tracking": {"max_lost": 3},
                "checkpoint": {
                    "path": str(tmp_path / "run" / "edge.ckpt"),
                    "interval_s": interval,
                    "on_events": on_events,
                },
                "uplink": {"queue": 8, "open_s": 0.5, "connect_timeout_s": 0.5},
            },
            "rules": RULES,
        },
    )
    edge_metrics = stack.metrics_url("edge")

    def edge(name: str, **labels: str) -> float:
        got = scrape(edge_metrics, timeout=2.0)
        return got.total(name, **labels) if got is not None else -1.0

    published: list[events_pb2.TrackEvent] = []
    try:
        stack.start_servers()
        first = Driver(zctx, stack)
        first.frames(0, CYCLE)  # cycle 0 with the cloud up
        deadline = time.monotonic() + 30
        while edge("strata_edge_uplink_events_total", status="stored") < len(first.sub.events):
            assert time.monotonic() < deadline, "cycle 0's events never reached the cloud"
            time.sleep(0.2)
        cloud_pid = stack.procs["cloud"].pid
        assert cloud_pid is not None
        os.kill(cloud_pid, signal.SIGKILL)  # the cloud goes away
        # Fresh: mid-track, both objects in view. Stale: their tracks ended since.
        kill_at = CYCLE + 16 + after_checkpoint
        first.frames(CYCLE, CYCLE + 16)
        time.sleep(interval + 0.3)  # a checkpoint lands; then more frames after it
        first.frames(CYCLE + 16, kill_at)
        assert edge("strata_edge_uplink_spool_events") > 0
        published += first.sub.events
        edge_pid = stack.procs["edge"].pid
        assert edge_pid is not None
        os.kill(edge_pid, signal.SIGKILL)  # kill -9 of the edge mid-track
        stack.procs["edge"].popen.wait(10)  # type: ignore[union-attr]
        stack._start("edge")  # from its checkpoint, journal and spool
        stack.wait_metrics("edge", 60)
        second = Driver(zctx, stack)
        second.frames(kill_at, CYCLES * CYCLE)
        published += second.sub.events
        stack._start("cloud")  # back, on the same store
        stack.wait_metrics("cloud", 60)
        deadline = time.monotonic() + 90
        while edge("strata_edge_uplink_spool_events") != 0:
            assert time.monotonic() < deadline, "the edge's events never drained"
            time.sleep(0.3)
        stored = cloud_events(stack.cloud_address)
    finally:
        stack.stop()
    keys = [s.event.idempotency_key for s in stored]
    assert len(keys) == len(set(keys))
    # Every event the edge published (either life) is in the cloud: none lost.
    missing = {e.idempotency_key for e in published} - set(keys)
    assert not missing, sorted(missing)
    by_track: dict[str, Counter[int]] = {}
    for s in stored:
        by_track.setdefault(s.event.track_uid, Counter())[s.event.type] += 1
    # Every track ended (the objects left the frame), each with exactly one end event.
    assert by_track and all(c[E.TRACK_EVENT_TYPE_END] == 1 for c in by_track.values()), by_track
    assert all(c[E.TRACK_EVENT_TYPE_NEW] == 1 for c in by_track.values()), by_track
    crossings = Counter(
        (s.event.after.label, s.event.direction)
        for s in stored
        if s.event.type == E.TRACK_EVENT_TYPE_LINE_CROSSED
    )
    assert crossings == {
        ("person", E.CROSSING_DIRECTION_IN): CYCLES,
        ("car", E.CROSSING_DIRECTION_OUT): CYCLES,
    }
    # In order per camera in the store's commit order.
    seqs = [s.event.sequence for s in sorted(stored, key=lambda s: s.stored_id)]
    assert seqs == sorted(seqs)
    assert np.all(np.diff(seqs) > 0)
