"""Events as JSON: Frigate's `frigate/events` message (type, before, after) with strata's
own fields under "strata" (the idempotency key first among them)."""

from __future__ import annotations

import json
from typing import Any

from .events import ObjectState, OutboxEvent


def object_json(o: ObjectState) -> dict[str, Any]:
    """Frigate's object fields."""
    return {
        "id": o.id,
        "camera": o.camera,
        "label": o.label,
        "sub_label": o.sub_label,
        # strata's: the cloud's second opinion on `label` (confirmed / rejected / abstained).
        "verdict": None if o.verdict is None else o.verdict.as_json(),
        "score": round(float(o.score), 6),
        "top_score": round(float(o.top_score), 6),
        "box": None if o.box is None else [round(float(v), 2) for v in o.box],
        "current_zones": list(o.current_zones),
        "entered_zones": list(o.entered_zones),
        "stationary": o.stationary,
        "start_time": o.start_time,
        "end_time": o.end_time,
        "frame_time": o.frame_time,
        "has_snapshot": o.has_snapshot,
    }


def event_json(ev: OutboxEvent) -> dict[str, Any]:
    """The event as a JSON object."""
    strata: dict[str, Any] = {
        "idempotency_key": ev.key,
        "camera_id": ev.camera_id,
        "edge_id": ev.edge_id,
        "stored_id": ev.stored_id,
        "stored_ns": ev.stored_ns,
        "capture_ns": ev.capture_ns,
    }
    for name in ("rule", "zone", "line", "direction", "snapshot_id", "frame_snapshot_id"):
        value = getattr(ev, name)
        if value:
            strata[name] = value
    strata.update(ev.extra)
    return {
        "type": ev.type,
        "before": None if ev.before is None else object_json(ev.before),
        "after": object_json(ev.after),
        "strata": strata,
    }


def event_bytes(ev: OutboxEvent) -> bytes:
    """The JSON body (compact, UTF-8)."""
    return json.dumps(event_json(ev), separators=(",", ":")).encode()
