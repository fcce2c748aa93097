"""device/transport/edges.py: what an edge's acks say about it, liveness and founding members."""

from __future__ import annotations

from strata.device.transport.edges import EdgeLink, heartbeat_header, tcp_endpoint, update_liveness
from strata.shared.contracts import frame_pb2
from strata.shared.ring import FOUNDING


def _info(session: int, **kw: object) -> frame_pb2.EdgeInfo:
    return frame_pb2.EdgeInfo(edge_id="e", edge_session=session, **kw)  # type: ignore[arg-type]


def test_a_new_edge_session_is_a_restart_and_a_bare_info_is_not() -> None:
    link = EdgeLink("tcp://127.0.0.1:1", None, created_at=0.0)
    assert not link.heard(1.0, _info(5, accepting=True))  # the first session is no restart
    assert not link.heard(2.0, _info(5, accepting=True))
    assert not link.heard(3.0, frame_pb2.EdgeInfo(model_input_width=640))
    assert link.info.edge_session == 5  # the bare info did not replace the announcement
    assert link.heard(4.0, _info(6, accepting=True))
    assert link.last_heard == 4.0 and link.edge_session == 6


def test_member_weight_and_refusals() -> None:
    link = EdgeLink("tcp://127.0.0.1:1", None, created_at=0.0)
    assert link.member(use_capacity=True) is None  # not up yet
    link.up = True
    older = link.member(use_capacity=True)  # never sent EdgeInfo: an ordinary node
    assert older is not None and older.weight == 1.0
    link.heard(1.0, _info(1, accepting=True, weight=2.0, capacity_fps=30.0, models=["m"]))
    m = link.member(use_capacity=True)
    assert m is not None and m.weight == 60.0 and m.models == frozenset({"m"})
    plain = link.member(use_capacity=False)
    assert plain is not None and plain.weight == 2.0
    link.heard(2.0, _info(1, accepting=False))
    assert link.member(use_capacity=True) is None


def test_liveness_marks_up_and_down_and_founding_members() -> None:
    a = EdgeLink("tcp://127.0.0.1:1", None, created_at=0.0, last_heard=9.0)
    b = EdgeLink("tcp://127.0.0.1:2", None, created_at=0.0)
    came, went = update_liveness([a, b], 10.0, 5.0, None)
    assert came == [a] and went == [] and a.joined_at == FOUNDING
    b.last_heard = 29.0
    came, went = update_liveness([a, b], 30.0, 5.0, founding_until=15.0)
    assert came == [b] and went == [a]
    assert b.joined_at == 30.0  # came after the founding window: it warms up


def test_heartbeat_and_endpoint_shapes() -> None:
    h = heartbeat_header("agent", 7)
    assert h.kind == frame_pb2.FRAME_KIND_HEARTBEAT and h.session_id == 7 and not h.camera_id
    assert tcp_endpoint("10.0.0.1", 5555) == "tcp://10.0.0.1:5555"
    assert tcp_endpoint("::1", 5555) == "tcp://[::1]:5555"
