"""ZeroMQ CURVE between device agents and edge nodes, with pyzmq's `zmq.auth`.

The edge holds a key pair and a folder of allowed client public keys; each client (a device
agent on the frame socket, a subscriber on the results socket) holds its own key pair and
the edge's public key. Key files are the ones `zmq.auth` writes
(`strata keys`): NAME.key (public) and NAME.key_secret (both halves).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class CurveError(ValueError):
    """A key file that is missing or not a CURVE certificate."""


def _auth() -> Any:
    # Typed loosely: the project's mypy config skips following zmq.
    return importlib.import_module("zmq.auth")


def make_key_pair(folder: str | Path, name: str) -> tuple[Path, Path]:
    """Write NAME.key and NAME.key_secret into `folder`; returns (public, secret) paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)  # the secret is never readable by others, not even for a moment
    try:
        public, secret = _auth().create_certificates(str(out), name)
    finally:
        os.umask(old)
    Path(public).chmod(0o644)
    return Path(public), Path(secret)


def load_keys(path: str | Path, need_secret: bool) -> tuple[bytes, bytes | None]:
    """(public, secret) Z85 keys of a certificate file; CurveError saying what is wrong."""
    p = Path(path)
    if not p.is_file():
        raise CurveError(f"CURVE key file {p} does not exist")
    try:
        public, secret = _auth().load_certificate(str(p))
    except (OSError, ValueError) as exc:
        raise CurveError(f"CURVE key file {p} is not a certificate: {exc}") from None
    if need_secret and not secret:
        raise CurveError(f"{p} holds no secret key (give the .key_secret file)")
    return public, secret


def allowed_clients(folder: str | Path) -> int:
    """Public keys in the allowed-clients folder (an error when the folder is missing)."""
    p = Path(folder)
    if not p.is_dir():
        raise CurveError(f"CURVE clients folder {p} does not exist")
    return len(list(p.glob("*.key")))


class AllowedKeys:
    """The ZAP handler's credentials provider: the clients folder's public keys, read once
    (as `zmq.auth` does: restart to admit a new key). A refused key is reported to
    `on_refused(domain)`, so each socket's refusals can be counted by its ZAP domain."""

    def __init__(self, folder: str | Path, on_refused: Callable[[str], None] | None) -> None:
        allowed_clients(folder)
        self.keys = frozenset(_auth().load_certificates(str(folder)))
        self._on_refused = on_refused

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.keys:
            return True
        if self._on_refused is not None:
            self._on_refused(domain)
        return False


def serve_curve(
    ctx: Any,
    servers: Mapping[str, Any],
    secret_key: str,
    clients_dir: str,
    on_refused: Callable[[str], None] | None = None,
) -> Any:
    """Make every socket of `servers` (ZAP domain -> socket, before it binds) a CURVE server
    with the key pair in `secret_key` that admits only keys in `clients_dir`; returns the
    started authenticator (stop it before the context terminates)."""
    import zmq

    public, secret = load_keys(secret_key, need_secret=True)
    provider = AllowedKeys(clients_dir, on_refused)
    auth = importlib.import_module("zmq.auth.thread").ThreadAuthenticator(ctx)
    auth.start()
    for domain, sock in servers.items():
        auth.configure_curve_callback(domain=domain, credentials_provider=provider)
        sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
    return auth


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """What a CURVE client holds: its own key pair and the server's public key (an agent's
    `device.sender.curve`, or a results subscriber's)."""

    secret_key: str
    server_key: str


def connect_curve(sock: Any, secret_key: str, server_key: str) -> None:
    """Make `sock` a CURVE client of the server whose public key is in `server_key` (before
    it connects)."""
    import zmq

    public, secret = load_keys(secret_key, need_secret=True)
    server_public, _ = load_keys(server_key, need_secret=False)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)


__all__ = [
    "AllowedKeys",
    "ClientKeys",
    "CurveError",
    "allowed_clients",
    "connect_curve",
    "load_keys",
    "make_key_pair",
    "serve_curve",
]
