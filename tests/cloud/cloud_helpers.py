"""Helpers of the cloud tests: config, client stub, JPEG crops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import grpc
import numpy as np
from strata.cloud.server import CloudServer
from strata.shared.config.base import validate_model
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2_grpc


def make_config(
    model_file: Path, db: Path, labels: Path | None = None, **extra: Any
) -> CloudConfig:
    """A CloudConfig on 127.0.0.1:0 with `extra` merged into the cloud section."""
    data: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "workers": 8,
        "grace_s": 0.5,
        "model": {"path": str(model_file), "labels_file": str(labels or "")},
        "store": {"path": str(db), "write_delay_ms": 1.0},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return validate_model(CloudConfig, data)


def stub_for(server: CloudServer) -> tuple[grpc.Channel, analytics_pb2_grpc.AnalyticsStub]:
    channel = grpc.insecure_channel(server.address)
    return channel, analytics_pb2_grpc.AnalyticsStub(channel)


def jpeg(bgr: tuple[int, int, int], w: int = 48, h: int = 40) -> bytes:
    """A JPEG of one colour."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:] = bgr
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return bytes(buf)
