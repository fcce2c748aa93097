"""The agent's edge directory, liveness and camera router, without processes."""

from __future__ import annotations

import collections
import math

import pytest
from pydantic import ValidationError
from strata.device.transport.edges import Directory, EdgeLink, tcp_endpoint, update_liveness
from strata.device.transport.routing import CameraRouter
from strata.shared.config.device import DeviceConfig, RoutingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.ring import FOUNDING


def test_static_entries_stay_as_given_and_dns_names_expand() -> None:
    d = Directory(["tcp://10.0.0.1:5555", "dns://localhost:5600"], 10.0)
    eps = d.endpoints()
    assert eps[0] == "tcp://10.0.0.1:5555"
    assert "tcp://127.0.0.1:5600" in eps
    assert all(e.startswith("tcp://") for e in eps)
    assert tcp_endpoint("::1", 7) == "tcp://[::1]:7"


def test_an_unresolvable_name_yields_nothing_and_is_retried() -> None:
    now = [0.0]
    d = Directory(["dns://no-such-edge.invalid:5555"], 5.0, clock=lambda: now[0])
    assert d.endpoints() == []
    now[0] = 6.0
    assert d.endpoints() == []


def test_a_failed_resolution_keeps_the_addresses_last_seen() -> None:
    answers: list[list[str] | OSError] = [["10.0.0.1", "10.0.0.2"], OSError("SERVFAIL")]

    def resolver(host: str, port: int) -> list[str]:
        a = answers.pop(0)
        if isinstance(a, OSError):
            raise a
        return a

    now = [0.0]
    d = Directory(["dns://edges:5555"], 5.0, resolver, clock=lambda: now[0])
    first = d.endpoints()
    now[0] = 6.0
    assert d.endpoints() == first == ["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"]


def _link(ep: str) -> EdgeLink:
    return EdgeLink(ep, sock=None, created_at=0.0)


def test_liveness_founding_edges_and_newcomers() -> None:
    a, b, c = _link("a"), _link("b"), _link("c")
    a.heard(10.0, None)
    came, went = update_liveness([a, b, c], 10.0, 2.0, None)
    assert came == [a] and a.joined_at == FOUNDING
    b.heard(11.0, None)
    update_liveness([a, b, c], 11.0, 2.0, 12.0)
    assert b.up and b.joined_at == FOUNDING  # within the founding window
    c.heard(20.0, None)
    a.heard(20.0, None)
    came, went = update_liveness([a, b, c], 20.0, 2.0, 12.0)
    assert came == [c] and c.joined_at == 20.0  # a newcomer warms up
    assert went == [b]


def test_edge_info_sets_weight_models_restart_and_draining() -> None:
    link = _link("tcp://e:1")
    info = frame_pb2.EdgeInfo(edge_session=5, weight=2.0, models=["yolo"], accepting=True)
    info.capacity_fps = 40.0
    assert not link.heard(1.0, info)
    link.up = True
    m = link.member(use_capacity=False)
    assert m is not None and m.weight == 2.0 and m.models == frozenset({"yolo"})
    m2 = link.member(use_capacity=True)
    assert m2 is not None and m2.weight == 80.0
    # An EdgeInfo without a session (older nodes sent the model input alone on every
    # ack) is neither a restart nor a replacement of what routing knows.
    assert not link.heard(1.5, frame_pb2.EdgeInfo(model_input_width=320))
    m3 = link.member(use_capacity=True)
    assert m3 is not None and m3.weight == 80.0 and m3.models == frozenset({"yolo"})
    restarted = frame_pb2.EdgeInfo(edge_session=6, accepting=True)
    assert link.heard(2.0, restarted)
    draining = frame_pb2.EdgeInfo(edge_session=6, accepting=False)
    link.heard(3.0, draining)
    assert link.member(False) is None
    link.up = False
    assert link.member(False) is None


def test_router_places_fails_over_and_paces_a_newcomer() -> None:
    from strata.shared.ring import Member

    r = CameraRouter(RoutingConfig(moves_per_s=1.0, warmup_s=5.0, ramp_s=0.0))
    for i in range(12):
        r.add_camera(f"cam{i}", "")
    a, b, c = Member("a"), Member("b"), Member("c")
    moves = r.update([a, b, c], 0.0, starting=True)
    assert len(moves) == 12 and all(m.forced for m in moves)
    assert all(r.edge_of(f"cam{i}") in ("a", "b", "c") for i in range(12))
    on_a = [k for k, e in r.placement().items() if e == "a"]
    moves = r.update([b, c], 1.0)
    assert {m.camera_id for m in moves} >= set(on_a)
    assert all(m.forced for m in moves if m.camera_id in on_a)
    assert "a" not in r.placement().values()
    # a returns as a newcomer: it takes cameras back one per second, at most half its share.
    back = Member("a", joined_at=2.0)
    seen = []
    t = 2.0
    while t < 6.0:
        seen.append(len(r.update([back, b, c], t)))
        t += 0.1
    assert max(seen) <= 1
    assert sum(1 for e in r.placement().values() if e == "a") <= 2
    r.remove_camera("cam0")
    assert r.edge_of("cam0") is None and "cam0" not in r.placement()


def test_once_the_newcomers_have_warmed_up_the_placement_keeps_the_full_bounds() -> None:
    # Two edges join a founding one that holds all 32 cameras: once their warm-up and ramp
    # are over, each edge holds at most ceil(1.15 x 32 / 3) = 13, at every phase of the
    # agent's updates (the ring built during the ramp must not stay in force after it).
    from strata.shared.ring import Member

    for phase in (0.0, 0.03, 0.07, 0.11, 0.13, 0.17, 0.19, 0.23):
        r = CameraRouter(RoutingConfig(moves_per_s=1.0, warmup_s=8.0, ramp_s=4.0))
        for i in range(32):
            r.add_camera(f"c{i}", "")
        first = Member("tcp://127.0.0.1:28616")
        r.update([first], 0.0, starting=True)
        joined = [Member(f"tcp://127.0.0.1:{p}", joined_at=2.0) for p in (28359, 23878)]
        t = 2.0 + phase
        while t < 60.0:
            r.update([first, *joined], t)
            t += 0.25
        per_edge = collections.Counter(r.placement().values())
        assert len(per_edge) == 3 and max(per_edge.values()) <= math.ceil(1.15 * 32 / 3), (
            phase,
            per_edge,
        )


def test_camera_model_falls_back_to_the_routing_default() -> None:
    r = CameraRouter(RoutingConfig(model="yolo"))
    r.add_camera("x", "")
    r.add_camera("y", "det")
    from strata.shared.ring import Member

    r.update([Member("a", models=frozenset({"yolo"})), Member("b", models=frozenset({"det"}))], 0)
    assert r.edge_of("x") == "a" and r.edge_of("y") == "b"


@pytest.mark.parametrize(
    "edges",
    [["127.0.0.1:5555"], ["dns://name"], ["dns://name:port"], ["tcp://a:1", "tcp://a:1"]],
)
def test_bad_edge_lists_are_refused(edges: list[str]) -> None:
    with pytest.raises(ValidationError):
        DeviceConfig(edges=edges)


def test_defaults_are_sane() -> None:
    cfg = RoutingConfig()
    assert cfg.edge_timeout_s + cfg.heartbeat_interval_s < 5.0  # failover within 5 s
    assert math.isclose(cfg.load_factor, 1.15)


def test_edge_flags_set_one_edge_or_the_list() -> None:
    from strata.device.cli import register
    from strata.shared.cli.parser import Parser

    p = Parser(prog="strata")
    register(p.add_subparsers())

    def edges(*flags: str) -> tuple[object, object]:
        from strata.device.cli import _overrides

        dev = _overrides(p.parse_args(["device", *flags])).get("device", {})
        return dev.get("edge"), dev.get("edges")

    assert edges() == (None, None)
    assert edges("--edge", "tcp://a:1") == ("tcp://a:1", [])
    assert edges("--edge", "tcp://a:1", "--edge", "tcp://b:1") == (
        None,
        ["tcp://a:1", "tcp://b:1"],
    )
    assert edges("--edge", "dns://edges:5555") == (None, ["dns://edges:5555"])
