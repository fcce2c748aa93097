"""Hostile inputs shared by the edge and cloud tests: the decode bomb, RSS readings."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

BOMB_SIDE = 23170  # 23170^2 px stays under OpenCV's own 2^30-pixel guard


def decode_bomb(side: int = BOMB_SIDE) -> bytes:
    """A tiny real JPEG whose frame header (SOF) claims side x side pixels."""
    ok, buf = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 50])
    assert ok
    data = bytearray(buf.tobytes())
    i = data.index(b"\xff\xc0")
    data[i + 5 : i + 9] = side.to_bytes(2, "big") * 2  # height, width
    return bytes(data)


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


class PeakRss:
    """Peak resident memory growth of a process from now on (Linux: VmHWM reset through
    /proc/PID/clear_refs)."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid or os.getpid()
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self.start = _status(self.pid, "VmRSS")

    def growth(self) -> int:
        """Bytes the peak exceeded the starting RSS by."""
        return _status(self.pid, "VmHWM") - self.start
