"""An on-disk copy of a camera's unacked frames, so an agent restart loses nothing.

One file per frame, named by its sequence number: a 4-byte big-endian header length, the
FrameHeader bytes, then the payload. Files are written under a temporary name and renamed,
so a crash never leaves half a frame; a file is deleted when its frame is acked or dropped.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from strata.shared.contracts import frame_pb2
from strata.shared.fsnames import path_component

log = logging.getLogger(__name__)

_SUFFIX = ".frame"
_LEN = struct.Struct(">I")


class DiskSpool:
    """The files of one camera under `root/<escaped camera id>/` (shared.fsnames: no two ids
    share a folder, none leaves `root`)."""

    def __init__(self, root: str | Path, camera_id: str) -> None:
        self.camera_id = camera_id
        self.dir = Path(root) / path_component(camera_id)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, sequence: int) -> Path:
        return self.dir / f"{sequence:020d}{_SUFFIX}"

    def save(self, header: frame_pb2.FrameHeader, payload: Any) -> None:
        """Write one frame (its header must carry its sequence)."""
        path = self._path(header.sequence)
        tmp = path.with_suffix(".part")
        head = header.SerializeToString()
        with open(tmp, "wb") as fh:
            fh.write(_LEN.pack(len(head)))
            fh.write(head)
            fh.write(memoryview(payload).cast("B"))
        os.replace(tmp, path)

    def remove(self, sequence: int) -> None:
        """Forget one frame (acked or dropped)."""
        try:
            self._path(sequence).unlink()
        except FileNotFoundError:
            pass

    def load(self) -> list[tuple[frame_pb2.FrameHeader, bytes]]:
        """Every stored frame, oldest first; unreadable files are logged and removed."""
        out: list[tuple[frame_pb2.FrameHeader, bytes]] = []
        for part in self.dir.glob("*.part"):
            part.unlink(missing_ok=True)
        for path in sorted(self.dir.glob(f"*{_SUFFIX}")):
            try:
                data = path.read_bytes()
                (n,) = _LEN.unpack_from(data)
                header = frame_pb2.FrameHeader.FromString(data[4 : 4 + n])
                payload = data[4 + n :]
                if len(payload) != header.payload_size and header.payload_size:
                    raise ValueError("payload size disagrees with its header")
                if header.camera_id and header.camera_id != self.camera_id:
                    raise ValueError(f"frame of camera {header.camera_id!r}, not this one")
            except (OSError, ValueError, struct.error, DecodeError) as exc:
                log.warning("disk spool: dropping unreadable %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            out.append((header, payload))
        return out
