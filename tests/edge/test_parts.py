"""The node's checkpoint parts: what each snapshots, restores at start and restores for
one camera taken over from a peer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter
from strata.edge.flow.ledger import DeliveryLedger, Seen
from strata.edge.ingest.intake import Ingest
from strata.edge.metrics import EdgeMetrics
from strata.edge.state.parts import CountersPart, SettledPart, UplinkPart
from strata.shared.config.edge import EdgeConfig, UplinkConfig
from strata.shared.contracts import frame_pb2

PROCESSED = frame_pb2.ACK_STATUS_PROCESSED


def test_settled_frames_restore_the_ledger_and_ingests_sessions() -> None:
    ledger = DeliveryLedger(100, 60.0)
    for seq in (1, 2, 3):
        ledger.add((7, "cam"), seq)
        ledger.settle((7, "cam"), seq, PROCESSED)
    saved = [
        s.settled() for s in SettledPart(ledger, Ingest(EdgeConfig(), EdgeMetrics())).snapshot()
    ]
    again, ingest = DeliveryLedger(100, 60.0), Ingest(EdgeConfig(), EdgeMetrics())
    said = SettledPart(again, ingest).restore(saved)
    assert said == "1 camera(s), 3 settled frame(s)"
    assert again.lookup((7, "cam"), 2).seen is Seen.SETTLED
    assert ingest.cameras == 1
    # A takeover restores the ledger alone.
    other = DeliveryLedger(100, 60.0)
    assert SettledPart(other, ingest).take_over(saved, "cam", "edge-a") == 3


def test_counters_restore_all_series_and_a_moved_camera_only_its_own() -> None:
    reg = CollectorRegistry()
    frames = Counter("frames", "f", ["camera"], registry=reg)
    frames.labels("a").inc(3)
    frames.labels("b").inc(4)
    saved = CountersPart([frames]).snapshot()
    fresh = Counter("frames", "f", ["camera"], registry=CollectorRegistry())
    assert CountersPart([fresh]).take_over(saved, "b", "edge-a") == 1
    assert fresh.labels("b")._value.get() == 4 and fresh.labels("a")._value.get() == 0
    assert CountersPart([fresh]).restore(saved) == "2 series"


def test_without_an_uplink_a_peers_spool_is_not_taken() -> None:
    part = UplinkPart(None, UplinkConfig(), Counter("c", "c", registry=CollectorRegistry()))
    snap = part.snapshot()
    assert snap.spool_path == "" and snap.spooled == 0
    assert part.take_over(snap.model_copy(update={"spool_path": "/x"}), "cam", "a") == 0
