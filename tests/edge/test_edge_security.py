"""The edge's sockets off loopback: refused in plaintext unless allowed, and the results PUB
socket admits only subscribers with an allowed CURVE key (real node, real ZeroMQ, loopback
traffic only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
import zmq
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.build import build_node
from strata.edge.node import EdgeNode
from strata.edge.security import EdgeSecurityError, check_binds, is_local
from strata.shared.config.edge import EdgeConfig
from strata.shared.curve import ClientKeys, connect_curve, make_key_pair
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(120)

STRATA = [sys.executable, "-m", "strata.tools.cli"]


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.0.0.2:0", True),
        ("tcp://localhost:5555", True),
        ("tcp://[::1]:5555", True),
        ("ipc:///run/strata/frames", True),
        ("inproc://frames", True),
        ("tcp://0.0.0.0:5555", False),
        ("tcp://*:5555", False),
        ("tcp://[::]:5555", False),
        ("tcp://eth0:5555", False),
        ("tcp://192.0.2.7:5555", False),
        ("epgm://eth0;239.192.1.1:5555", False),
    ],
)
def test_only_loopback_ipc_and_inproc_are_local(address: str, local: bool) -> None:
    assert is_local(address) is local


@pytest.mark.parametrize(
    ("listen", "publish", "named"),
    [
        ("tcp://0.0.0.0:5555", "tcp://127.0.0.1:5556", ["edge.listen"]),
        ("tcp://127.0.0.1:5555", "tcp://*:5556", ["edge.publish"]),
        ("tcp://0.0.0.0:5555", "tcp://0.0.0.0:5556", ["edge.listen", "edge.publish"]),
    ],
)
def test_plaintext_off_loopback_is_refused_in_one_line(
    listen: str, publish: str, named: list[str]
) -> None:
    cfg = EdgeConfig(listen=listen, publish=publish)
    with pytest.raises(EdgeSecurityError) as err:
        check_binds(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "edge.allow_insecure: true" in msg
    assert "edge.curve.secret_key" in msg
    for key in ("edge.listen", "edge.publish"):
        assert (key in msg) is (key in named), msg
    # Either way out of it is accepted.
    check_binds(cfg.model_copy(update={"allow_insecure": True}))
    curve = {"secret_key": "/k/edge.key_secret", "clients_dir": "/k/clients"}
    check_binds(EdgeConfig.model_validate({"listen": listen, "publish": publish, "curve": curve}))
    check_binds(EdgeConfig())  # the defaults are loopback


def test_node_refuses_before_binding(colour_model: Path) -> None:
    port = free_port()
    cfg = EdgeConfig.model_validate(
        {
            "listen": f"tcp://0.0.0.0:{port}",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
        }
    )
    node = build_node(cfg, colour_model, "colour")
    try:
        with pytest.raises(EdgeSecurityError, match=r"edge\.allow_insecure"):
            node.start()
        # Nothing was bound: the same port is free on loopback (0.0.0.0 would hold it).
        with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as probe:
            probe.setsockopt(zmq.LINGER, 0)
            probe.bind(f"tcp://127.0.0.1:{port}")
    finally:
        node.stop()


def _edge_config(tmp_path: Path, colour_model: Path, edge: dict[str, Any]) -> Path:
    path = tmp_path / "strata.yaml"
    base = {"model": {"path": str(colour_model), "input_size": MODEL_SIZE}}
    path.write_text(yaml.safe_dump({"logging": {"level": "INFO"}, "edge": {**base, **edge}}))
    return path


def test_edge_daemon_off_loopback_without_curve_exits_2(tmp_path: Path, colour_model: Path) -> None:
    listen = f"tcp://0.0.0.0:{free_port()}"
    config = _edge_config(tmp_path, colour_model, {"listen": listen})
    out = subprocess.run(
        [*STRATA, "edge", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("strata edge:")]
    assert len(lines) == 1, out.stderr
    assert f"plaintext ZeroMQ on {listen} (edge.listen)" in lines[0]
    assert "edge.allow_insecure: true" in lines[0]
    assert "frames on" not in out.stderr  # it never started serving


@pytest.mark.slow
def test_edge_daemon_with_allow_insecure_serves(
    tmp_path: Path, colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # Bound on every address, reached only through 127.0.0.1.
    port_in, port_out = free_port(), free_port()
    edge = {
        "listen": f"tcp://0.0.0.0:{port_in}",
        "publish": f"tcp://0.0.0.0:{port_out}",
        "allow_insecure": True,
        "batching": {"max_queue_delay_ms": 2},
    }
    config = _edge_config(tmp_path, colour_model, edge)
    proc = subprocess.Popen(
        [*STRATA, "edge", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        sub = Listener(zctx, f"tcp://127.0.0.1:{port_out}")
        agent = RawAgent(zctx, f"tcp://127.0.0.1:{port_in}")
        got: list[Any] = []
        seq = 0
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline and proc.poll() is None:
            seq += 1
            agent.send_image("cam", seq, synthetic_clip.frame(30).image, frame_index=30)
            got = sub.collect(1, timeout_s=1.0)
        assert got, "no results from the edge bound with allow_insecure"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


@pytest.fixture
def curve_node(colour_model: Path, tmp_path: Path) -> Iterator[Callable[[Path, Path], EdgeNode]]:
    nodes: list[EdgeNode] = []

    def make(secret: Path, clients: Path) -> EdgeNode:
        cfg = EdgeConfig.model_validate(
            {
                "listen": "tcp://127.0.0.1:0",
                "publish": "tcp://127.0.0.1:0",
                "model": {"input_size": MODEL_SIZE},
                "batching": {"max_batch": 4, "max_queue_delay_ms": 5},
                "flow": {"initial_credits": 64},
                "curve": {"secret_key": str(secret), "clients_dir": str(clients)},
            }
        )
        node = build_node(cfg, colour_model, "colour")
        node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.stop()


class _KeyedAgent(RawAgent):
    """A RawAgent whose DEALER is a CURVE client."""

    def __init__(self, ctx: Any, address: str, keys: ClientKeys) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        connect_curve(self.sock, keys.secret_key, keys.server_key)
        self.sock.connect(address)
        self.agent_id = "keyed"
        self.session_id = 5


def test_results_reach_keyed_subscribers_only(
    curve_node: Callable[[Path, Path], EdgeNode],
    zctx: Any,
    synthetic_clip: SyntheticClip,
    tmp_path: Path,
) -> None:
    server_pub, server_secret = make_key_pair(tmp_path / "server", "edge")
    agent_pub, agent_secret = make_key_pair(tmp_path / "keys", "agent")
    watcher_pub, watcher_secret = make_key_pair(tmp_path / "keys", "watcher")
    _, stranger_secret = make_key_pair(tmp_path / "strangers", "stranger")
    clients = tmp_path / "clients"
    clients.mkdir()
    for pub in (agent_pub, watcher_pub):
        (clients / pub.name).write_bytes(pub.read_bytes())
    node = curve_node(server_secret, clients)
    publish = node.endpoints.publish
    # Connected first, so they are there while every result below is published.
    plain = Listener(zctx, publish)
    stranger = Listener(zctx, publish, curve=ClientKeys(str(stranger_secret), str(server_pub)))
    watcher = Listener(zctx, publish, curve=ClientKeys(str(watcher_secret), str(server_pub)))
    agent = _KeyedAgent(zctx, node.endpoints.listen, ClientKeys(str(agent_secret), str(server_pub)))
    image = synthetic_clip.frame(30).image
    wait_until_subscribed(agent, watcher, image)
    for seq in range(1, 6):
        agent.send_image("cam", seq, image, frame_index=30)
    assert sorted(r.sequence for r in watcher.collect(5)) == [1, 2, 3, 4, 5]
    assert plain.collect(1, timeout_s=0.5) == []
    assert stranger.collect(1, timeout_s=0.5) == []
    reg = node.metrics.registry
    assert sample(reg, "strata_edge_peers_refused_total", {"reason": "subscriber"}) >= 1


def test_strata_keys_pair_subscribes_like_an_agent(
    curve_node: Callable[[Path, Path], EdgeNode],
    zctx: Any,
    synthetic_clip: SyntheticClip,
    tmp_path: Path,
) -> None:
    """The README's recipe: `strata keys` pairs, the subscriber's .key in clients_dir, and
    tools/subscriber.py's ResultSubscriber gets results with its ClientKeys."""
    from strata.shared.contracts import frame_pb2
    from strata.tools.cli import main
    from strata.tools.subscriber import ResultSubscriber

    keys, clients = tmp_path / "keys", tmp_path / "clients"
    assert main(["keys", "edge", "cam-host", "dashboard", "--out", str(keys)]) == 0
    clients.mkdir()
    for name in ("cam-host", "dashboard"):
        (clients / f"{name}.key").write_bytes((keys / f"{name}.key").read_bytes())
    node = curve_node(keys / "edge.key_secret", clients)

    class Seen(ResultSubscriber):
        def __init__(self, publishers: list[str], curve: ClientKeys) -> None:
            self.sequences: list[int] = []
            super().__init__(publishers, curve=curve)

        def on_result(self, msg: frame_pb2.FrameDetections, received_ns: int) -> None:
            self.sequences.append(msg.sequence)

    seen = Seen(
        [node.endpoints.publish],
        ClientKeys(str(keys / "dashboard.key_secret"), str(keys / "edge.key")),
    )
    try:
        agent_keys = ClientKeys(str(keys / "cam-host.key_secret"), str(keys / "edge.key"))
        agent = _KeyedAgent(zctx, node.endpoints.listen, agent_keys)
        image = synthetic_clip.frame(30).image
        deadline = time.monotonic() + 30
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            agent.send_image("cam", seq, image, frame_index=30)
            time.sleep(0.2)
            with seen.lock:
                if seen.sequences:
                    break
        with seen.lock:
            assert seen.sequences, "the keyed ResultSubscriber got no results"
    finally:
        seen.close()
