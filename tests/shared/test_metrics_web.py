"""The /metrics server of every tier: open on loopback, refused off loopback without TLS and
authentication, and with TLS + basic auth (or mTLS) a scrape without credentials gets 401."""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter
from strata.shared.config import ConfigError, load_config
from strata.shared.config.common import MetricsConfig
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.metrics_web import MetricsSecurityError, MetricsServer, check_bind, serve
from tls_certs import Pki, make_pki

STRATA = [sys.executable, "-m", "strata.tools.cli"]
PASSWORD = "scrape-me"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def hashed() -> str:
    # Cost 4: the test checks the protocol, not bcrypt's strength.
    return bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("strata_test_frames", "A metric to find in the page.", registry=reg).inc(3)
    return reg


@pytest.fixture
def servers() -> Iterator[list[MetricsServer]]:
    started: list[MetricsServer] = []
    yield started
    for s in started:
        s.stop()


def web(pki: Pki, users: dict[str, str], **tls: str) -> dict[str, Any]:
    return {
        "tls_server_config": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
        | tls,
        "basic_auth_users": users,
    }


def get(url: str, ctx: ssl.SSLContext | None = None, auth: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        assert exc.headers.get("WWW-Authenticate", "").startswith("Basic"), exc.headers
        return int(exc.code), exc.read().decode()


def client_ctx(pki: Pki, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return ctx


def start(registry: CollectorRegistry, servers: list[MetricsServer], **cfg: Any) -> MetricsServer:
    server = serve(
        registry, MetricsConfig(host="127.0.0.1", port=free_port(), **cfg), "device.metrics"
    )
    assert server is not None
    servers.append(server)
    return server


def test_loopback_stays_open_by_default(
    registry: CollectorRegistry, servers: list[MetricsServer]
) -> None:
    server = start(registry, servers)
    assert server.url.startswith("http://127.0.0.1:")
    status, body = get(server.url)
    assert status == 200 and "strata_test_frames_total 3.0" in body
    assert serve(registry, MetricsConfig(port=0), "device.metrics") is None


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "camera-host-1"])
def test_off_loopback_without_tls_and_auth_is_refused_naming_the_option(
    host: str, pki: Pki, hashed: str
) -> None:
    for partial in ({}, web(pki, {}), {"basic_auth_users": {"prometheus": hashed}}):
        cfg = MetricsConfig(host=host, port=9101, web=partial)
        with pytest.raises(MetricsSecurityError) as err:
            check_bind(cfg, "edge.metrics")
        msg = str(err.value)
        assert "\n" not in msg and "edge.metrics.allow_insecure: true" in msg, msg
        assert f"on {host}:9101" in msg
    # Either TLS with authentication, or the explicit opt-out, lets it bind.
    check_bind(MetricsConfig(host=host, port=9101, web=web(pki, {"p": hashed})), "edge.metrics")
    mtls = web(pki, {}, client_ca_file=str(pki.ca), client_auth_type="RequireAndVerifyClientCert")
    check_bind(MetricsConfig(host=host, port=9101, web=mtls), "edge.metrics")
    check_bind(MetricsConfig(host=host, port=9101, allow_insecure=True), "edge.metrics")


def test_the_refusal_comes_before_the_port_opens(registry: CollectorRegistry) -> None:
    # A port of a non-loopback address this host has none of: binding would fail with
    # OSError; the refusal must come first, from the config alone.
    with pytest.raises(MetricsSecurityError):
        serve(registry, MetricsConfig(host="192.0.2.1", port=free_port()), "cloud.metrics")


def test_tls_and_basic_auth_refuse_a_scrape_without_credentials(
    registry: CollectorRegistry, servers: list[MetricsServer], pki: Pki, hashed: str
) -> None:
    server = start(registry, servers, web=web(pki, {"prometheus": hashed}))
    assert server.url.startswith("https://")
    ctx = client_ctx(pki)
    assert get(server.url, ctx)[0] == 401
    assert get(server.url, ctx, "prometheus:wrong")[0] == 401
    assert get(server.url, ctx, "nobody:" + PASSWORD)[0] == 401
    status, body = get(server.url, ctx, "prometheus:" + PASSWORD)
    assert status == 200 and "strata_test_frames_total 3.0" in body
    # Twice: the second answer comes from the cache of accepted passwords, same result.
    assert get(server.url, ctx, "prometheus:" + PASSWORD)[0] == 200
    refused = "strata_metrics_scrapes_refused_total"
    assert sample(registry, refused, {"reason": "no credentials"}) == 1
    assert sample(registry, refused, {"reason": "wrong password"}) == 1
    assert sample(registry, refused, {"reason": "unknown user"}) == 1
    # Plain HTTP to the TLS port gets no metrics.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        get(server.url.replace("https://", "http://"), None, "prometheus:" + PASSWORD)


def test_mtls_admits_only_a_client_certificate_from_the_ca(
    registry: CollectorRegistry, servers: list[MetricsServer], pki: Pki
) -> None:
    mtls = web(pki, {}, client_ca_file=str(pki.ca), client_auth_type="RequireAndVerifyClientCert")
    server = start(registry, servers, web=mtls)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        get(server.url, client_ctx(pki))
    assert get(server.url, client_ctx(pki, cert=True))[0] == 200


def test_a_silent_client_does_not_block_other_scrapes(
    registry: CollectorRegistry, servers: list[MetricsServer], pki: Pki, hashed: str
) -> None:
    server = start(registry, servers, web=web(pki, {"prometheus": hashed}))
    # Connects and never starts the handshake: handled in its own thread.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        status, _ = get(server.url, client_ctx(pki), "prometheus:" + PASSWORD)
    assert status == 200


def test_unreadable_tls_files_are_a_clear_error(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    bad = {"tls_server_config": {"cert_file": str(tmp_path / "no.pem"), "key_file": "k"}}
    with pytest.raises(MetricsSecurityError, match="cannot load its files"):
        serve(registry, MetricsConfig(port=free_port(), web=bad), "device.metrics")


@pytest.mark.parametrize(
    ("metrics", "words"),
    [
        ({"web": {"basic_auth_users": {"prometheus": "plaintext"}}}, "not a bcrypt hash"),
        ({"web": {"tls_server_config": {"cert_file": "c.pem"}}}, "both cert_file and key_file"),
        (
            {"web": {"tls_server_config": {"client_auth_type": "RequireAndVerifyClientCert"}}},
            "needs client_ca_file",
        ),
    ],
)
def test_bad_web_settings_are_refused_at_load(
    tmp_path: Path, metrics: dict[str, Any], words: str
) -> None:
    path = tmp_path / "strata.yaml"
    path.write_text(yaml.safe_dump({"cloud": {"metrics": metrics}}))
    with pytest.raises(ConfigError, match=words):
        load_config(path)


def test_cloud_cli_refuses_open_metrics_off_loopback(tmp_path: Path) -> None:
    config = tmp_path / "strata.yaml"
    port = free_port()
    config.write_text(
        yaml.safe_dump(
            {
                "cloud": {
                    "listen": f"127.0.0.1:{free_port()}",
                    "metrics": {"host": "0.0.0.0", "port": port},
                }
            }
        )
    )
    out = subprocess.run(
        [*STRATA, "cloud", "--config", str(config), "--db", str(tmp_path / "e.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("strata cloud:")]
    assert len(lines) == 1 and "cloud.metrics.allow_insecure: true" in lines[0], out.stderr


def test_device_cli_refuses_open_metrics_off_loopback(tmp_path: Path, synthetic_mp4: Path) -> None:
    config = tmp_path / "strata.yaml"
    config.write_text(yaml.safe_dump({"device": {"metrics": {"host": "0.0.0.0"}}}))
    out = subprocess.run(
        [
            *STRATA,
            "device",
            "--config",
            str(config),
            "--source",
            str(synthetic_mp4),
            "--edge",
            f"tcp://127.0.0.1:{free_port()}",
            "--metrics-port",
            str(free_port()),
            "--duration",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("strata device:")]
    assert len(lines) == 1 and "device.metrics.allow_insecure: true" in lines[0], out.stderr
