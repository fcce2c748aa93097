"""ZeroMQ CURVE between device agents and edge nodes, with pyzmq's `zmq.auth`.

The edge holds a key pair and a folder of allowed client public keys; each agent holds its
own key pair and the edge's public key. Key files are the ones `zmq.auth` writes
(`strata keys`): NAME.key (public) and NAME.key_secret (both halves).
"""

from __future__ import annotations

import importlib
import os
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


def serve_curve(ctx: Any, sock: Any, secret_key: str, clients_dir: str) -> Any:
    """Make `sock` a CURVE server that only admits keys in `clients_dir`; returns the
    started authenticator (stop it before the context terminates)."""
    import zmq

    public, secret = load_keys(secret_key, need_secret=True)
    allowed_clients(clients_dir)
    auth = importlib.import_module("zmq.auth.thread").ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(Path(clients_dir)))
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    return auth


def connect_curve(sock: Any, secret_key: str, server_key: str) -> None:
    """Make `sock` a CURVE client of the server whose public key is in `server_key`."""
    import zmq

    public, secret = load_keys(secret_key, need_secret=True)
    server_public, _ = load_keys(server_key, need_secret=False)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)


__all__ = [
    "CurveError",
    "allowed_clients",
    "connect_curve",
    "load_keys",
    "make_key_pair",
    "serve_curve",
]
