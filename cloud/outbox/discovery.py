"""Home Assistant MQTT discovery: retained configs on
`<discovery_prefix>/<component>/<node_id>/<object_id>/config` so each camera appears as a
device with its entities and no configuration on Home Assistant's side:

- sensor `<label>_count`: objects of a label in view (state <prefix>/<camera>/<label>);
- sensor `last_event`: the latest event's label, its JSON as attributes
  (<prefix>/<camera>/event);
- image `<label>_snapshot`: the latest snapshot (image_topic <prefix>/<camera>/<label>/snapshot).

Every entity names the device, a unique_id, and <prefix>/available (the last will's topic)
as its availability. Ids keep to [a-zA-Z0-9_-] as discovery requires.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def safe_id(text: str) -> str:
    """`text` as a discovery id: other characters become '_'."""
    return _UNSAFE.sub("_", text) or "_"


@dataclass(frozen=True, slots=True)
class Topics:
    """Where strata publishes under one prefix."""

    prefix: str
    discovery_prefix: str = "homeassistant"

    @property
    def events(self) -> str:
        """Every event (Frigate's frigate/events)."""
        return f"{self.prefix}/events"

    @property
    def available(self) -> str:
        """online / offline, retained; offline is the last will."""
        return f"{self.prefix}/available"

    def last_event(self, camera: str) -> str:
        """A camera's latest event, retained."""
        return f"{self.prefix}/{camera}/event"

    def count(self, camera: str, label: str, zone: str = "") -> str:
        """Objects of a label in view (in a zone), retained."""
        if zone:
            return f"{self.prefix}/{camera}/{zone}/{label}"
        return f"{self.prefix}/{camera}/{label}"

    def snapshot(self, camera: str, label: str) -> str:
        """The latest snapshot JPEG of a label, retained."""
        return f"{self.prefix}/{camera}/{label}/snapshot"


@dataclass(frozen=True, slots=True)
class DiscoveryConfig:
    """One retained discovery message."""

    topic: str
    payload: dict[str, Any]

    def body(self) -> bytes:
        """The JSON payload."""
        return json.dumps(self.payload, separators=(",", ":")).encode()


def node_id(t: Topics, camera: str) -> str:
    """The discovery node (and device) of a camera under this prefix."""
    return safe_id(f"strata_{t.prefix}_{camera}")


def _common(t: Topics, camera: str, object_id: str, name: str) -> dict[str, Any]:
    node = node_id(t, camera)
    return {
        "name": name,
        "unique_id": f"{node}_{object_id}",
        "availability_topic": t.available,
        "payload_available": "online",
        "payload_not_available": "offline",
        "device": {
            "identifiers": [node],
            "name": f"{camera}",
            "manufacturer": "strata",
            "model": "camera",
        },
        "origin": {"name": "strata"},
    }


def _topic(t: Topics, component: str, camera: str, object_id: str) -> str:
    return f"{t.discovery_prefix}/{component}/{node_id(t, camera)}/{object_id}/config"


def camera_configs(t: Topics, camera: str) -> list[DiscoveryConfig]:
    """The camera's own entities (its last event)."""
    oid = "last_event"
    payload = _common(t, camera, oid, "Last event")
    payload.update(
        state_topic=t.last_event(camera),
        value_template="{{ value_json.after.label }}",
        json_attributes_topic=t.last_event(camera),
        json_attributes_template="{{ value_json.after | tojson }}",
        icon="mdi:cctv",
    )
    return [DiscoveryConfig(_topic(t, "sensor", camera, oid), payload)]


def label_configs(t: Topics, camera: str, label: str, zone: str = "") -> list[DiscoveryConfig]:
    """A label's count (whole camera or one zone) and, camera-wide, its snapshot image."""
    where = f"{safe_id(zone)}_" if zone else ""
    oid = f"{where}{safe_id(label)}_count"
    count = _common(t, camera, oid, f"{zone + ' ' if zone else ''}{label} count")
    count.update(
        state_topic=t.count(camera, label, zone),
        state_class="measurement",
        unit_of_measurement="objects",
        icon="mdi:counter",
    )
    out = [DiscoveryConfig(_topic(t, "sensor", camera, oid), count)]
    if not zone:
        sid = f"{safe_id(label)}_snapshot"
        snap = _common(t, camera, sid, f"{label} snapshot")
        snap.update(image_topic=t.snapshot(camera, label), content_type="image/jpeg")
        out.append(DiscoveryConfig(_topic(t, "image", camera, sid), snap))
    return out
