"""Config sections every daemon shares."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import StrictModel


class LoggingConfig(StrictModel):
    """How daemons log (through a queue, so logging never blocks a hot path)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Lowest level written."
    )
    json_lines: bool = Field(False, description="One JSON object per line instead of text.")


# A bcrypt hash as htpasswd -B, Python's bcrypt and Prometheus' exporter-toolkit write it.
_BCRYPT = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")


class MetricsTlsConfig(StrictModel):
    """TLS of /metrics: the `tls_server_config` of Prometheus' web config file (web.yml)."""

    cert_file: str = Field("", description="PEM certificate (chain) served; empty: no TLS.")
    key_file: str = Field("", description="PEM private key of cert_file.")
    client_ca_file: str = Field(
        "", description="CA bundle that client certificates must chain to (with client_auth_type)."
    )
    client_auth_type: Literal["NoClientCert", "RequireAndVerifyClientCert"] = Field(
        "NoClientCert",
        description="RequireAndVerifyClientCert: only scrapers with a certificate from "
        "client_ca_file connect (mTLS).",
    )

    @model_validator(mode="after")
    def _complete(self) -> MetricsTlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("tls_server_config needs both cert_file and key_file, or neither")
        if self.client_auth_type == "RequireAndVerifyClientCert" and not self.client_ca_file:
            raise ValueError("client_auth_type RequireAndVerifyClientCert needs client_ca_file")
        if self.client_ca_file and not self.cert_file:
            raise ValueError(
                "client_ca_file needs cert_file and key_file (client certificates need TLS)"
            )
        return self

    @property
    def enabled(self) -> bool:
        """True when /metrics speaks TLS."""
        return bool(self.cert_file)


class MetricsWebConfig(StrictModel):
    """Who may read /metrics, in the keys of Prometheus' web config file (exporter-toolkit's
    web.yml, as node_exporter reads with --web.config.file): paste one in here."""

    tls_server_config: MetricsTlsConfig = Field(
        default_factory=MetricsTlsConfig, description="TLS of the /metrics server."
    )
    basic_auth_users: dict[str, str] = Field(
        default_factory=dict,
        description="User name to bcrypt hash (`htpasswd -nBC 10 USER`); empty: no basic auth.",
    )

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt_hashes(cls, users: dict[str, str]) -> dict[str, str]:
        for user, hashed in users.items():
            if not user or ":" in user:
                raise ValueError(f"basic_auth_users: user name {user!r} is empty or has a ':'")
            if not _BCRYPT.match(hashed):
                raise ValueError(
                    f"basic_auth_users.{user}: not a bcrypt hash ($2y$10$...); make one with "
                    "`htpasswd -nBC 10 USER` or `python -c 'import bcrypt; "
                    'print(bcrypt.hashpw(b"PASSWORD", bcrypt.gensalt()).decode())\''
                )
        return users

    @property
    def authenticates(self) -> bool:
        """True when a scraper must prove who it is (a password or a client certificate)."""
        tls = self.tls_server_config
        return bool(self.basic_auth_users) or tls.client_auth_type == "RequireAndVerifyClientCert"


class MetricsConfig(StrictModel):
    """Prometheus exposition for one daemon: open on loopback; off loopback only with TLS and
    authentication (web), unless allow_insecure says otherwise."""

    host: str = Field("127.0.0.1", description="Address the /metrics HTTP server binds to.")
    port: int = Field(0, ge=0, le=65535, description="Port of /metrics; 0 turns it off.")
    web: MetricsWebConfig = Field(
        default_factory=MetricsWebConfig,
        description="TLS and basic auth of /metrics (Prometheus' web.yml keys).",
    )
    allow_insecure: bool = Field(
        False,
        description="Serve /metrics off loopback without TLS and authentication (a trusted "
        "network only: every camera's names and counts are readable).",
    )


class CostConfig(StrictModel):
    """Prices of the cost model (`strata cost`, `strata bench`), per camera.

    GPU time is each batch's time split over its frames; egress is what leaves the edge
    site for the cloud; storage is events held for `retention_days`. Decimal GB (10^9 B),
    as clouds bill. The defaults are list prices of the order of a public cloud's."""

    currency: str = Field("USD", description="Currency the prices are in (a label only).")
    gpu_per_hour: float = Field(2.5, ge=0.0, description="Price of one GPU-hour.")
    egress_per_gb: float = Field(0.09, ge=0.0, description="Price of one GB leaving the edge.")
    storage_per_gb_month: float = Field(
        0.023, ge=0.0, description="Price of one GB stored for a month."
    )
    retention_days: float = Field(
        30.0, gt=0.0, description="Days events are kept (storage held at steady state)."
    )
