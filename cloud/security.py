"""Transport security and bearer-token authentication of the gRPC server."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from strata.shared.config.cloud import CloudAuthConfig, CloudTlsConfig

log = logging.getLogger(__name__)

HEALTH_PREFIX = "/grpc.health.v1.Health/"


class SecurityError(ValueError):
    """A security setting that cannot work (missing file, unsafe bind)."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(f"cannot read {what} {path}: {exc.strerror}") from exc


def split_listen(listen: str) -> tuple[str, int]:
    """HOST:PORT (or [V6]:PORT) into host and port; SecurityError when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SecurityError(f"listen address {listen!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(listen: str, tls: bool, allow_insecure: bool) -> None:
    """Refuse a plaintext server on a non-loopback address unless explicitly allowed."""
    host, _ = split_listen(listen)
    if not tls and not is_loopback(host) and not allow_insecure:
        raise SecurityError(
            f"refusing to serve plaintext gRPC on {listen}: set cloud.tls.cert_file and "
            "key_file, listen on 127.0.0.1, or set cloud.allow_insecure: true"
        )


def server_credentials(cfg: CloudTlsConfig) -> grpc.ServerCredentials | None:
    """TLS credentials (mTLS when client_ca_file is set), or None for plaintext."""
    if not cfg.cert_file and not cfg.key_file:
        if cfg.client_ca_file:
            raise SecurityError("cloud.tls.client_ca_file needs cert_file and key_file (TLS)")
        return None
    if not (cfg.cert_file and cfg.key_file):
        raise SecurityError("cloud.tls needs both cert_file and key_file")
    cert = _read(cfg.cert_file, "TLS certificate")
    key = _read(cfg.key_file, "TLS key")
    ca = _read(cfg.client_ca_file, "client CA bundle") if cfg.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def load_token(cfg: CloudAuthConfig) -> str | None:
    """The bearer token clients must send, or None when no token is configured."""
    if not cfg.token_file:
        return None
    token = _read(cfg.token_file, "token file").decode().strip()
    if not token:
        raise SecurityError(f"token file {cfg.token_file} is empty")
    return token


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses calls without `authorization: Bearer TOKEN` with UNAUTHENTICATED."""

    def __init__(
        self,
        token: str,
        health_without_token: bool,
        on_reject: Callable[[str, str], None],
    ) -> None:
        self._expected = f"Bearer {token}".encode()
        self._health_open = health_without_token
        self._on_reject = on_reject

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails
    ) -> Any:
        method = str(details.method)
        if self._health_open and method.startswith(HEALTH_PREFIX):
            return await continuation(details)
        given = b""
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                break
        if hmac.compare_digest(given, self._expected):
            return await continuation(details)
        reason = "missing bearer token" if not given else "wrong bearer token"
        self._on_reject(method, reason)
        handler = await continuation(details)
        if handler is None:
            return None
        return _denying(handler, reason)


def _denying(handler: Any, reason: str) -> Any:
    """A handler of the same shape as `handler` that aborts with UNAUTHENTICATED, unparsed."""

    async def deny(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    kw = {"request_deserializer": None, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny, **kw)
    return grpc.unary_unary_rpc_method_handler(deny, **kw)
