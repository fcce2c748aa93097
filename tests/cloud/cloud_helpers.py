"""Helpers of the cloud tests: config, client stub, JPEG crops."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import cv2
import grpc
import numpy as np
from strata.cloud.api.watch import Subscription, WatchHub
from strata.cloud.server import CloudServer
from strata.shared.config.base import validate_model
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc


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


def read_watch(call: Any) -> queue.Queue[Any]:
    """A watch call's messages, put in a queue by a thread once the call is subscribed (its
    header came); the thread ends quietly with the call."""
    call.initial_metadata()  # subscribed once the header arrives
    got: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for ev in call:
                got.put(ev)
        except grpc.RpcError:
            pass

    threading.Thread(target=read, daemon=True).start()
    return got


def jpeg(bgr: tuple[int, int, int], w: int = 48, h: int = 40) -> bytes:
    """A JPEG of one colour."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:] = bgr
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return bytes(buf)


class LoopThread:
    """An event loop in a thread, for WatchHub subscriptions outside a server (store tests)."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def subscribe(
        self, hub: WatchHub, camera_id: str = "", label: str = ""
    ) -> Subscription[Any] | None:
        """hub.subscribe on the loop (WatchUnavailableError passes through)."""
        import asyncio

        async def sub() -> Subscription[Any] | None:
            return hub.subscribe(camera_id, label)

        return asyncio.run_coroutine_threadsafe(sub(), self.loop).result(10)

    def subscribe_tracks(self, hub: WatchHub, q: Any) -> Subscription[Any] | None:
        """hub.subscribe_tracks on the loop."""
        import asyncio

        async def sub() -> Subscription[Any] | None:
            return hub.subscribe_tracks(q)

        return asyncio.run_coroutine_threadsafe(sub(), self.loop).result(10)

    @staticmethod
    def next_event(sub: Subscription[Any], timeout: float) -> Any:
        """The next queued event of `sub`; TimeoutError when none comes in time."""
        import time

        deadline = time.monotonic() + timeout
        while not sub.queue:
            if time.monotonic() > deadline:
                raise TimeoutError("no event")
            time.sleep(0.01)
        return sub.queue.popleft()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def stored_event(i: int, camera: str = "cam", t: int = 0) -> analytics_pb2.Event:
    """A store test's event: car on odd i, person on even, sequences from the top of uint64."""
    return analytics_pb2.Event(
        edge_id="e",
        crop_id=f"c{i}",
        camera_id=camera,
        sequence=2**64 - 1 - i,
        capture_ns=t or 1000 + i,
        label="car" if i % 2 else "person",
        score=0.5,
    )


def track_event(
    seq: int,
    camera: str = "door",
    track: tuple[int, int] = (1_000, 7),
    kind: str = "new",
    **fields: Any,
) -> Any:
    """A valid TrackEvent: `track` is (first_seen_ns, track id), captured at 1 ms + `seq` us;
    the key follows the contract (docs/events.md); `fields` override or add (zone, line...)."""
    from strata.cloud.store.track_filter import idempotency_key, parse_type
    from strata.shared.contracts import current_version, events_pb2

    first_seen, track_id = track
    label = fields.pop("label", "person")
    ev = events_pb2.TrackEvent(
        version=current_version(),
        type=parse_type(kind),  # type: ignore[arg-type]
        camera_id=camera,
        track_id=track_id,
        track_uid=f"{first_seen}-{track_id}",
        sequence=seq,
        track_sequence=fields.pop("track_sequence", seq),
        capture_ns=fields.pop("capture_ns", 1_000_000 + seq * 1000),
        edge_id="edge-a",
        frame_width=640,
        frame_height=480,
        after=events_pb2.TrackState(label=label, score=0.8, top_score=0.9),
        observed=fields.pop("observed", True),
        positions=2,
        observed_positions=2,
        **fields,
    )
    ev.path.points.add(x=0.5, y=0.9, capture_ns=ev.capture_ns, observed=True)
    ev.idempotency_key = idempotency_key(ev)
    return ev


def picture(w: int = 64, h: int = 48, seed: int = 0) -> bytes:
    """A JPEG with detail in it (a gradient and a block), `w` x `h`."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w, 1)), (y * 255 // max(h, 1)), (x + y + seed) % 256], -1)
    img = img.astype(np.uint8)
    img[h // 4 : h // 2, w // 4 : w // 2] = (seed * 37 % 256, 200, 30)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return bytes(buf)


def snapshot(
    camera: str = "door",
    track: tuple[int, int] = (1_000, 7),
    kind: str = "best_crop",
    revision: int = 0,
    **fields: Any,
) -> Any:
    """A valid Snapshot (events.proto) of a track with a real JPEG; `fields` override."""
    from strata.shared.contracts import current_version, events_pb2
    from strata.shared.snapshot_ids import parse_kind, snapshot_id

    first_seen, track_id = track
    k = parse_kind(kind)
    w, h = fields.pop("size", (64, 48) if kind == "best_crop" else (160, 120))
    data = fields.pop("jpeg", None)
    if data is None:
        data = picture(w, h, revision)
    snap = events_pb2.Snapshot(
        version=current_version(),
        snapshot_id=snapshot_id(camera, f"{first_seen}-{track_id}", k, revision),
        camera_id=camera,
        track_uid=f"{first_seen}-{track_id}",
        track_id=track_id,
        kind=k,  # type: ignore[arg-type]
        revision=revision,
        edge_id="edge-a",
        jpeg=data,
        width=w,
        height=h,
        frame_width=640,
        frame_height=480,
        label=fields.pop("label", "person"),
        score=0.8,
        quality=0.8,
        capture_ns=fields.pop("capture_ns", 1_000_000 + revision),
        reason=events_pb2.SNAPSHOT_REASON_FIRST
        if revision == 0
        else events_pb2.SNAPSHOT_REASON_BETTER,
        **fields,
    )
    snap.box.x1, snap.box.y1, snap.box.x2, snap.box.y2 = 4, 4, w - 4, h - 4
    return snap


def decodes(data: bytes) -> tuple[int, int]:
    """(width, height) of a JPEG that decodes; fails the test otherwise."""
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None, "the JPEG does not decode"
    return int(img.shape[1]), int(img.shape[0])
