"""A real gRPC server on loopback that implements Analytics.UploadClip honestly: each
clip's bytes appended to a file (synced before the ack says so), acks by committed size,
a chunk past the committed size answered RETRY with it, complete once the final chunk is
in (a last chunk that says `cut_back` truncates what is held to its end, as the cloud's
clip_rows does). Faults on request: the server stopped after N chunks (a restart), stored bytes lost
at chunk N (a gap), RETRY with a wait, a camera refused (INVALID)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from strata.shared.contracts import analytics_pb2_grpc, clips_pb2
from strata.shared.fsnames import path_component

STORED = clips_pb2.CLIP_CHUNK_STATUS_STORED
RETRY = clips_pb2.CLIP_CHUNK_STATUS_RETRY
INVALID = clips_pb2.CLIP_CHUNK_STATUS_INVALID


@dataclass
class Faults:
    """What goes wrong, counted in chunks received over the server's life."""

    stop_after: int = 0  # the server stops (no ack) when this chunk arrives
    lose_at: int = 0  # at this chunk the store loses the second half of what it held
    wait_at: int = 0  # this chunk is answered RETRY with retry_after_ms
    refuse_camera: str = ""
    chunks: int = 0
    lost: int = 0  # bytes the store lost (lose_at)
    stopped: threading.Event = field(default_factory=threading.Event)


class ClipStore(analytics_pb2_grpc.AnalyticsServicer):
    """The honest store (see the module docstring)."""

    def __init__(self, root: Path, faults: Faults) -> None:
        self.root = root
        self.faults = faults
        self.infos: dict[str, clips_pb2.ClipInfo] = {}
        self.complete: set[str] = set()
        self._lock = threading.Lock()

    def path(self, clip_id: str) -> Path:
        return self.root / path_component(clip_id)

    def UploadClip(
        self, request_iterator: Iterator[clips_pb2.ClipChunk], context: Any
    ) -> Iterator[clips_pb2.ClipChunkAck]:
        for chunk in request_iterator:
            with self._lock:
                ack = self._take(chunk)
            if ack is None:
                return
            yield ack

    def _take(self, chunk: clips_pb2.ClipChunk) -> clips_pb2.ClipChunkAck | None:
        f = self.faults
        f.chunks += 1
        if f.stop_after and f.chunks >= f.stop_after and not f.stopped.is_set():
            f.stopped.set()
            return None
        info = chunk.info
        path = self.path(info.clip_id)
        committed = path.stat().st_size if path.exists() else 0
        if f.lose_at and f.chunks == f.lose_at and committed:
            f.lost = committed - committed // 2
            committed //= 2
            os.truncate(path, committed)
        if f.refuse_camera and info.camera_id == f.refuse_camera:
            return clips_pb2.ClipChunkAck(
                clip_id=info.clip_id, status=INVALID, reason="unknown camera"
            )
        if f.wait_at and f.chunks == f.wait_at:
            return clips_pb2.ClipChunkAck(
                clip_id=info.clip_id, status=RETRY, committed_bytes=committed, retry_after_ms=200
            )
        if chunk.offset > committed:
            return clips_pb2.ClipChunkAck(
                clip_id=info.clip_id, status=RETRY, committed_bytes=committed, reason="gap"
            )
        end = chunk.offset + len(chunk.data)
        if chunk.last and chunk.cut_back and end < committed:  # kept: the prefix
            os.truncate(path, end)
            committed = end
        new = chunk.data[committed - chunk.offset :]
        if new:
            with open(path, "ab") as out:
                out.write(new)
                out.flush()
                os.fsync(out.fileno())
            committed += len(new)
        self.infos[info.clip_id] = info
        done = chunk.last and info.final and committed == info.size_bytes
        if done:
            self.complete.add(info.clip_id)
        return clips_pb2.ClipChunkAck(
            clip_id=info.clip_id, status=STORED, committed_bytes=committed, complete=done
        )


class Cloud:
    """The store served on 127.0.0.1:`port`; `restart` serves it again (same files)."""

    def __init__(self, root: Path, port: int, faults: Faults | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.store = ClipStore(root, faults or Faults())
        self.port = port
        self.server: Any = None
        self.start()

    def start(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        analytics_pb2_grpc.add_AnalyticsServicer_to_server(self.store, self.server)  # type: ignore[no-untyped-call]
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0).wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def bytes_of(self, clip_id: str) -> bytes:
        return self.store.path(clip_id).read_bytes()
