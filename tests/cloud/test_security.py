"""TLS, mTLS and the bearer token, with certificates made at test time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from cloud_helpers import jpeg, make_config
from grpc_health.v1 import health_pb2, health_pb2_grpc
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, common_pb2, current_version
from strata.shared.metrics import sample
from tls_certs import Pki, make_pki

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def request() -> analytics_pb2.ClassifyRequest:
    return analytics_pb2.ClassifyRequest(
        version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=jpeg((255, 0, 0))
    )


def secure_stub(
    server: CloudServer, pki: Pki, client_cert: bool = False
) -> tuple[grpc.Channel, analytics_pb2_grpc.AnalyticsStub]:
    creds = grpc.ssl_channel_credentials(
        pki.ca.read_bytes(),
        pki.client_key.read_bytes() if client_cert else None,
        pki.client_cert.read_bytes() if client_cert else None,
    )
    channel = grpc.secure_channel(f"127.0.0.1:{server.port}", creds)
    return channel, analytics_pb2_grpc.AnalyticsStub(channel)


def test_tls_with_token_refuses_a_client_without_it(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = start_server(
        make_config(
            model,
            tmp_path / "e.sqlite",
            labels,
            tls={"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
            auth={"token_file": str(token_file)},
        )
    )
    channel, stub = secure_stub(server, pki)
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(request(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(request(), timeout=10, metadata=[("authorization", "Bearer wrong")])
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    q = analytics_pb2.QueryEventsRequest(version=current_version())
    with pytest.raises(grpc.RpcError) as err:
        list(stub.QueryEvents(q, timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    reg = server.metrics.registry
    refused = {"reason": "unauthenticated"}
    assert sample(reg, "strata_cloud_request_failure_total", {"method": "Classify", **refused}) == 2
    assert (
        sample(reg, "strata_cloud_request_failure_total", {"method": "QueryEvents", **refused}) == 1
    )

    ok = stub.Classify(request(), timeout=10, metadata=[("authorization", f"Bearer {TOKEN}")])
    assert ok.labels[0].label == "blue"
    # Load balancers may probe health without the token.
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1

    # A plaintext client cannot talk to the TLS port at all.
    plain = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    with pytest.raises(grpc.RpcError) as err:
        analytics_pb2_grpc.AnalyticsStub(plain).Classify(request(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    plain.close()
    channel.close()


def test_mtls_needs_a_client_certificate(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    server = start_server(
        make_config(
            model,
            tmp_path / "e.sqlite",
            labels,
            tls={
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
                "client_ca_file": str(pki.ca),
            },
        )
    )
    channel, stub = secure_stub(server, pki, client_cert=False)
    with pytest.raises(grpc.RpcError) as err:
        stub.Classify(request(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()
    channel, stub = secure_stub(server, pki, client_cert=True)
    assert stub.Classify(request(), timeout=10).labels[0].label == "blue"
    channel.close()


def test_tls_or_an_explicit_opt_in_allows_a_non_loopback_bind() -> None:
    from strata.cloud.security import check_bind

    check_bind("0.0.0.0:50051", tls=True, allow_insecure=False)
    check_bind("0.0.0.0:50051", tls=False, allow_insecure=True)
    check_bind("[::1]:50051", tls=False, allow_insecure=False)


def test_health_needs_the_token_when_health_without_token_is_false(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    pki: Pki,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = start_server(
        make_config(
            model,
            tmp_path / "e.sqlite",
            labels,
            tls={"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
            auth={"token_file": str(token_file), "health_without_token": False},
        )
    )
    channel, _stub = secure_stub(server, pki)
    health = health_pb2_grpc.HealthStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    refused = {"method": "Check", "reason": "unauthenticated"}
    assert sample(server.metrics.registry, "strata_cloud_request_failure_total", refused) == 1
    token = [("authorization", f"Bearer {TOKEN}")]
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5, metadata=token).status == 1
    channel.close()
