"""The edge's uplink against the real cloud over TLS, mTLS and a bearer token (issue 13)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cloud_helpers import jpeg, make_config
from strata.cloud.server import CloudServer
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.breaker import BreakerState
from strata.edge.uplink.stream import Uplink
from strata.shared.config.cloud import CloudConfig
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2, common_pb2
from strata.shared.metrics import sample
from tls_certs import Pki, make_pki

pytestmark = pytest.mark.timeout(90)
TOKEN = "edge-uplink-token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def crops(n: int, start: int = 0) -> list[analytics_pb2.Crop]:
    image = jpeg((0, 0, 255))
    return [
        analytics_pb2.Crop(
            crop_id=f"u{i}",
            edge_id="edge-a",
            camera_id="cam",
            sequence=i + 1,
            encoding=common_pb2.ENCODING_JPEG,
            image=image,
        )
        for i in range(start, start + n)
    ]


def wait_for(cond: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return cond()


def secure_server(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
    mtls: bool = False,
) -> CloudServer:
    model, labels = colour_model
    token_file = tmp_path / "server-token"
    token_file.write_text(TOKEN + "\n")
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
    if mtls:
        tls["client_ca_file"] = str(pki.ca)
    return start_server(
        make_config(
            model,
            tmp_path / "e.sqlite",
            labels,
            tls=tls,
            auth={"token_file": str(token_file)},
        )
    )


def uplink(
    server: CloudServer, tmp_path: Path, name: str, **over: Any
) -> tuple[Uplink, EdgeMetrics]:
    metrics = EdgeMetrics()
    cfg = UplinkConfig.model_validate(
        {
            "connect_timeout_s": 1.0,
            "open_s": 0.5,
            "failure_threshold": 2,
            "spool_path": str(tmp_path / f"{name}.sqlite"),
            **over,
        }
    )
    up = Uplink(f"127.0.0.1:{server.port}", cfg, metrics)
    up.start()
    return up, metrics


def stored(server: CloudServer) -> int:
    return int(
        sample(server.metrics.registry, "strata_cloud_request_success_total", {"method": "Uplink"})
    )


def test_uplink_over_tls_with_token_is_stored(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    server = secure_server(colour_model, tmp_path, pki, start_server)
    token = tmp_path / "edge-token"
    token.write_text(TOKEN)
    up, m = uplink(server, tmp_path, "ok", tls={"ca_file": str(pki.ca)}, token_file=str(token))
    try:
        up.offer(crops(6))
        assert wait_for(
            lambda: sample(m.registry, "strata_edge_crops_total", {"status": "stored"}) == 6
        )
        assert stored(server) == 6
        assert up.breaker.state is BreakerState.CLOSED
    finally:
        up.stop()


def test_mtls_uplink_with_a_client_certificate_is_stored(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    server = secure_server(colour_model, tmp_path, pki, start_server, mtls=True)
    token = tmp_path / "edge-token"
    token.write_text(TOKEN)
    tls = {
        "ca_file": str(pki.ca),
        "cert_file": str(pki.client_cert),
        "key_file": str(pki.client_key),
    }
    up, m = uplink(server, tmp_path, "mtls", tls=tls, token_file=str(token))
    try:
        up.offer(crops(3))
        assert wait_for(
            lambda: sample(m.registry, "strata_edge_crops_total", {"status": "stored"}) == 3
        )
    finally:
        up.stop()


@pytest.mark.parametrize("fault", ["wrong_ca", "no_token", "wrong_token", "plaintext"])
def test_a_wrong_ca_or_token_fails_clearly_and_keeps_the_crops(
    fault: str,
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = secure_server(colour_model, tmp_path, pki, start_server)
    other = make_pki(
        Path(tmp_path / "other").resolve() if (tmp_path / "other").mkdir() is None else tmp_path
    )
    token = tmp_path / "edge-token"
    token.write_text("not-the-token" if fault == "wrong_token" else TOKEN)
    over: dict[str, Any] = {"tls": {"ca_file": str(other.ca if fault == "wrong_ca" else pki.ca)}}
    if fault == "plaintext":
        over = {}
    if fault != "no_token":
        over["token_file"] = str(token)
    up, m = uplink(server, tmp_path, fault, queue=4, open_s=2.0, **over)
    caplog.set_level("WARNING", logger="strata.edge")
    try:
        up.offer(crops(10))
        assert wait_for(lambda: up.breaker.state is BreakerState.OPEN)
        # Nothing lost: memory (4), the spool and the probe in flight hold all ten.
        assert up.waiting == 10 and up.spooled >= 1
        assert stored(server) == 0
        assert sample(m.registry, "strata_edge_drops_total", {"reason": "crop_buffer_full"}) == 0
        text = caplog.text
        expected = {
            "wrong_ca": "UNAVAILABLE",
            "no_token": "UNAUTHENTICATED",
            "wrong_token": "UNAUTHENTICATED",
            "plaintext": "UNAVAILABLE",
        }[fault]
        assert expected in text, text[-2000:]
        if fault in ("no_token", "wrong_token"):
            assert "bearer token" in text
    finally:
        up.stop()
    # With the right settings the same spool delivers every crop.
    good = tmp_path / "good-token"
    good.write_text(TOKEN)
    up2, m2 = uplink(server, tmp_path, fault, tls={"ca_file": str(pki.ca)}, token_file=str(good))
    try:
        assert wait_for(
            lambda: sample(m2.registry, "strata_edge_crops_total", {"status": "stored"}) == 10, 30
        )
    finally:
        up2.stop()


def test_dns_name_and_address_list_over_tls(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    """dns:///localhost:PORT (round_robin over what it resolves to), and a list of two
    replicas' addresses verified against the certificate's name (tls.server_name)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = secure_server(colour_model, tmp_path / "a", pki, start_server)
    two = secure_server(colour_model, tmp_path / "b", pki, start_server)
    token = tmp_path / "edge-token"
    token.write_text(TOKEN)
    tls = {"ca_file": str(pki.ca)}
    for name, target, extra in (
        ("dns", f"dns:///localhost:{one.port}", {}),
        ("list", [f"127.0.0.1:{one.port}", f"127.0.0.1:{two.port}"], {"server_name": "localhost"}),
    ):
        metrics = EdgeMetrics()
        cfg = UplinkConfig.model_validate(
            {
                "connect_timeout_s": 2.0,
                "streams": 2,
                "stream_max_age_s": 0.3,
                "spool_path": str(tmp_path / f"{name}.sqlite"),
                "tls": {**tls, **extra},
                "token_file": str(token),
            }
        )
        up = Uplink(target, cfg, metrics)
        up.start()
        try:
            for i in range(10):
                up.offer(crops(4, start=1000 * len(name) + 4 * i))
                time.sleep(0.05)
            assert wait_for(
                lambda m=metrics: (
                    sample(m.registry, "strata_edge_crops_total", {"status": "stored"}) == 40
                ),
                30,
            ), name
        finally:
            up.stop()
    assert stored(one) > 0 and stored(two) > 0  # the list spread over both replicas
