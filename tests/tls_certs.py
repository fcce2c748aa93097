"""A throwaway CA, server and client certificate, made with `cryptography` at test time."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    ca: bool,
    server: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(d: Path) -> Pki:
    """Write a CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    ca_key = _key()
    ca = _cert("strata test CA", ca_key, None, ca_key, ca=True)
    pem = serialization.Encoding.PEM
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    skey, ckey = _key(), _key()
    server = _cert("127.0.0.1", skey, ca.subject, ca_key, ca=False, server=True)
    client = _cert("edge-a", ckey, ca.subject, ca_key, ca=False)
    (d / "server.pem").write_bytes(server.public_bytes(pem))
    (d / "client.pem").write_bytes(client.public_bytes(pem))
    return Pki(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=_write_key(skey, d / "server.key"),
        client_cert=d / "client.pem",
        client_key=_write_key(ckey, d / "client.key"),
    )
