"""Config of the cloud's event sinks (`cloud.sinks`): MQTT brokers and webhooks fed by the
outbox (cloud/outbox; docs/sinks.md). Off by default: no sink is configured."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from .base import StrictModel

# A sink's name is a metric label and a key in the outbox's tables.
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _check_name(v: str) -> str:
    if not _NAME.match(v):
        raise ValueError("must be 1-64 letters, digits, '_', '.' or '-'")
    return v


SinkName = Annotated[str, AfterValidator(_check_name)]


class SinkFilterConfig(StrictModel):
    """Which events a sink gets; an empty list lets every value through."""

    cameras: list[str] = Field(default_factory=list, description="Only these cameras.")
    labels: list[str] = Field(default_factory=list, description="Only these labels.")
    zones: list[str] = Field(
        default_factory=list, description="Only events in (or about) one of these zones."
    )
    rules: list[str] = Field(default_factory=list, description="Only events of these rules.")
    types: list[str] = Field(
        default_factory=list,
        description="Only these event types (new, update, end, line_crossed, ...).",
    )


class MqttSinkConfig(StrictModel):
    """One MQTT broker: Frigate's topics and Home Assistant discovery."""

    name: SinkName = Field("mqtt", description="Sink name (metrics label, delivery position key).")
    host: str = Field("127.0.0.1", description="Broker host name or address.")
    port: int = Field(1883, ge=1, le=65535, description="Broker port (8883 is usual for TLS).")
    prefix: str = Field("strata", description="Topic prefix: PREFIX/events, PREFIX/available, ...")
    client_id: str = Field("", description="MQTT client id; empty: strata-SINK-HOST-PID.")
    username: str = Field("", description="User name for the broker; empty: anonymous.")
    password_file: str = Field("", description="File holding the broker password.")
    tls: bool = Field(False, description="Connect with TLS.")
    ca_file: str = Field("", description="PEM CA bundle the broker is checked against.")
    cert_file: str = Field("", description="PEM client certificate (mutual TLS).")
    key_file: str = Field("", description="PEM key of cert_file.")
    tls_insecure: bool = Field(
        False, description="Do not check the broker's host name (self-signed test brokers)."
    )
    qos: Literal[0, 1, 2] = Field(1, description="QoS of event messages (1: acked by the broker).")
    keepalive_s: int = Field(30, ge=5, le=3600, description="MQTT keepalive interval.")
    publish_timeout_s: float = Field(
        10.0, gt=0, le=300, description="Longest wait for the broker to ack one event."
    )
    retain_event: bool = Field(
        True,
        description="Also publish each camera's latest event, retained: PREFIX/CAMERA/event.",
    )
    discovery: bool = Field(True, description="Publish Home Assistant discovery configs.")
    discovery_prefix: str = Field("homeassistant", description="Home Assistant's discovery prefix.")
    filter: SinkFilterConfig = Field(
        default_factory=SinkFilterConfig, description="Which events this broker gets."
    )

    @field_validator("prefix", "discovery_prefix")
    @classmethod
    def _topic_prefix(cls, v: str) -> str:
        if not v or any(c in v for c in "+#") or v.startswith("/") or v.endswith("/"):
            raise ValueError("must be a non-empty topic without wildcards or edge slashes")
        return v

    @model_validator(mode="after")
    def _pairs(self) -> MqttSinkConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("set cert_file and key_file together")
        if self.password_file and not self.username:
            raise ValueError("password_file needs a username")
        return self


class WebhookSinkConfig(StrictModel):
    """One HTTP endpoint: a signed JSON POST per event."""

    name: SinkName = Field(
        "webhook", description="Sink name (metrics label, delivery position key)."
    )
    url: str = Field("", description="http:// or https:// URL events are POSTed to (required).")
    secret_file: str = Field(
        "", description="File holding the HMAC-SHA256 key of X-Strata-Signature; empty: unsigned."
    )
    ca_file: str = Field("", description="PEM CA bundle for an https URL; empty: the system's.")
    connect_timeout_s: float = Field(3.0, gt=0, le=60, description="TCP/TLS connect timeout.")
    timeout_s: float = Field(
        5.0, gt=0, le=120, description="Longest wait for the receiver's answer to one POST."
    )
    attempts: int = Field(
        4, ge=1, le=20, description="Tries per event before the sink backs off and comes back."
    )
    backoff_s: float = Field(0.5, gt=0, description="First wait between tries (doubles).")
    max_backoff_s: float = Field(30.0, gt=0, description="Longest wait between tries.")
    cooldown_s: float = Field(
        1.0,
        ge=0,
        description="Skip an event of the same camera, track, rule and type sent this recently.",
    )
    filter: SinkFilterConfig = Field(
        default_factory=SinkFilterConfig, description="Which events this endpoint gets."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v:
            raise ValueError("required: the http:// or https:// URL to POST events to")
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v


class SinksConfig(StrictModel):
    """Where stored events are delivered (the outbox); nothing by default."""

    mqtt: list[MqttSinkConfig] = Field(default_factory=list, description="MQTT brokers.")
    webhooks: list[WebhookSinkConfig] = Field(
        default_factory=list, description="Webhook endpoints."
    )
    start: Literal["now", "all"] = Field(
        "now",
        description="Where a sink seen for the first time starts: new events, or all stored.",
    )
    poll_s: float = Field(
        0.2, gt=0, le=60, description="How often each sink looks for new events when idle."
    )
    batch: int = Field(100, ge=1, le=10_000, description="Events read per camera per pass.")
    lease_s: float = Field(
        30.0,
        ge=2,
        description="A replica's claim on a camera's delivery; another takes over after it.",
    )
    max_backlog: int = Field(
        100_000,
        ge=1,
        description="Undelivered events kept per sink and camera; older ones are dropped.",
    )
    gap_wait_s: float = Field(
        30.0,
        gt=0,
        description="PostgreSQL: longest wait for an uncommitted event id before skipping it.",
    )
    retry_s: float = Field(1.0, gt=0, description="First wait after a failed delivery (doubles).")
    max_retry_s: float = Field(60.0, gt=0, description="Longest wait after failed deliveries.")

    @model_validator(mode="after")
    def _unique_names(self) -> SinksConfig:
        names = [s.name for s in self.mqtt] + [s.name for s in self.webhooks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"sink names must be unique; repeated: {', '.join(dup)}")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any sink is configured."""
        return bool(self.mqtt or self.webhooks)
