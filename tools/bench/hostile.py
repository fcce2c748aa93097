"""Hostile input against the real daemons: `strata bench hostile`.

Starts `strata edge` and `strata cloud` (starter models, or --edge-model / --cloud-model)
as their own processes and measures, from /proc of each daemon (VmHWM reset through
clear_refs before each probe):
- the decode bomb (a 631-byte JPEG whose SOF claims 23170x23170) sent to the edge with a
  small frame header, and a legitimate frame 10 ms later: peak RSS growth and the legitimate
  frame's send-to-result time, over --rounds rounds;
- a 200 MB message part to the edge: peak RSS growth;
- the same bomb on the cloud's Classify and Uplink: peak RSS growth and the next Classify;
- the cost of the check itself: the SOF parser against Pillow's lazy `Image.open`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from strata.shared.config.edge import DEFAULT_DETECTOR
from strata.shared.contracts import analytics_pb2, common_pb2, current_version, frame_pb2
from strata.shared.imagecheck import jpeg_size
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_line
from strata.shared.wire import is_events_topic, pack_frame

MB = 1 << 20
BOMB_SIDE = 23170


def decode_bomb(side: int = BOMB_SIDE) -> bytes:
    """A tiny real JPEG whose frame header claims side x side pixels."""
    import cv2

    ok, buf = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 50])
    if not ok:
        raise RuntimeError("cv2 cannot encode JPEG")
    data = bytearray(buf.tobytes())
    i = data.index(b"\xff\xc0")
    data[i + 5 : i + 9] = side.to_bytes(2, "big") * 2
    return bytes(data)


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _peak(pid: int) -> Callable[[], int]:
    """Start a peak-RSS window on `pid`; the returned function gives bytes of growth."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    start = _status(pid, "VmRSS")
    return lambda: _status(pid, "VmHWM") - start


def _daemon(args: list[str], yaml: str, tmp: Path) -> subprocess.Popen[bytes]:
    cfg = tmp / f"{args[0]}.yaml"
    cfg.write_text("logging:\n  level: ERROR\n" + yaml)
    cmd = [sys.executable, "-m", "strata.tools.cli", *args, "--config", str(cfg)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL)


def _frame(seq: int, payload: Any, width: int, height: int) -> list[Any]:
    header = frame_pb2.FrameHeader(
        camera_id="cam",
        sequence=seq,
        session_id=1,
        width=width,
        height=height,
        encoding=common_pb2.ENCODING_JPEG,
        capture_ns=time.time_ns(),
    )
    return pack_frame(header, payload)


def _result(sub: Any, timeout: float) -> bool:
    """A frame's result arrived within `timeout` (track events on the same socket skipped)."""
    end = time.monotonic() + timeout
    while sub.poll(max(0, int((end - time.monotonic()) * 1000))):
        if not is_events_topic(sub.recv_multipart()[0]):
            return True
    return False


def edge_probe(tmp: Path, model: str, rounds: int) -> dict[str, Any]:
    """Bomb + legitimate frame rounds and a 200 MB part against `strata edge`."""
    import cv2
    import zmq

    listen, publish = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    model_yaml = f"    path: {model}\n" if model else ""
    proc = _daemon(
        ["edge"],
        f"edge:\n  listen: {listen}\n  publish: {publish}\n  model:\n    name: {DEFAULT_DETECTOR}\n"
        + model_yaml
        + "  batching:\n    max_queue_delay_ms: 2\n",
        tmp,
    )
    ctx = zmq.Context()
    try:
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(listen)
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(publish)
        img = np.full((576, 768, 3), 90, np.uint8)
        cv2.rectangle(img, (300, 150), (360, 400), (200, 200, 200), -1)
        legit = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 80])[1].tobytes()
        seq = 0

        def send_legit() -> float:
            nonlocal seq
            seq += 1
            t = time.monotonic()
            dealer.send_multipart(_frame(seq, legit, 768, 576), copy=False)
            return t

        end = time.monotonic() + 120
        while True:  # until the node is up and results reach us
            send_legit()
            if _result(sub, 1.0) or time.monotonic() > end:
                break
        for _ in range(5):
            send_legit()
            _result(sub, 5.0)
        while _result(sub, 0.2):
            pass
        bomb = decode_bomb()
        growth, latency = [], []
        for _ in range(rounds):
            peak = _peak(proc.pid)
            seq += 1
            dealer.send_multipart(_frame(seq, bomb, 768, 576), copy=False)
            time.sleep(0.01)
            t = send_legit()
            got = _result(sub, 10.0)
            latency.append((time.monotonic() - t) * 1e3 if got else float("inf"))
            growth.append(peak())
        while dealer.poll(100):
            dealer.recv_multipart()
        peak = _peak(proc.pid)
        flood = ctx.socket(zmq.DEALER)
        flood.connect(listen)
        flood.send_multipart(_frame(seq + 1, bytearray(200 * MB), 768, 576), copy=False)
        time.sleep(3.0)
        big = peak()
        flood.close(0)
        after = send_legit()
        alive = _result(sub, 10.0)
        return {
            "bomb_bytes": len(bomb),
            "rounds": rounds,
            "bomb_peak_rss_growth_mb_max": max(growth) / MB,
            "legit_after_bomb_ms_p50": float(np.median(latency)),
            "legit_after_bomb_ms_max": max(latency),
            "msg_200mb_peak_rss_growth_mb": big / MB,
            "served_after_200mb_ms": (time.monotonic() - after) * 1e3 if alive else None,
        }
    finally:
        ctx.destroy(linger=0)
        proc.terminate()
        proc.wait(30)


def cloud_probe(tmp: Path, model: str, rounds: int) -> dict[str, Any]:
    """The bomb on Classify and Uplink of `strata cloud`."""
    import cv2
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from strata.shared.contracts import analytics_pb2_grpc

    address = f"127.0.0.1:{free_port()}"
    model_yaml = f"    path: {model}\n" if model else ""
    proc = _daemon(
        ["cloud", "--listen", address, "--db", str(tmp / "events.sqlite")],
        "cloud:\n  model:\n    name: mobilenetv2_imagenet\n" + model_yaml,
        tmp,
    )
    channel = grpc.insecure_channel(address)
    try:
        health = health_pb2_grpc.HealthStub(channel)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    break
            except grpc.RpcError:
                time.sleep(0.2)
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        good = cv2.imencode(".jpg", np.full((96, 64, 3), 120, np.uint8))[1].tobytes()

        def classify(image: bytes) -> str:
            req = analytics_pb2.ClassifyRequest(
                version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=image
            )
            try:
                stub.Classify(req, timeout=30)
                return "OK"
            except grpc.RpcError as exc:
                return str(exc.code().name)

        for _ in range(3):
            classify(good)
        bomb = decode_bomb()
        growth, codes, latency = [], set(), []
        for i in range(rounds):
            peak = _peak(proc.pid)
            codes.add(classify(bomb))
            crop = analytics_pb2.Crop(
                crop_id=f"bomb-{i}",
                edge_id="e",
                camera_id="cam",
                encoding=common_pb2.ENCODING_JPEG,
                image=bomb,
            )
            batch = analytics_pb2.CropBatch(version=current_version(), crops=[crop])
            for r in stub.Uplink(iter([batch]), timeout=30):
                codes.update(analytics_pb2.CropStatus.Name(a.status) for a in r.acks)
            t = time.monotonic()
            classify(good)
            latency.append((time.monotonic() - t) * 1e3)
            growth.append(peak())
        return {
            "rounds": rounds,
            "answers": sorted(codes),
            "bomb_peak_rss_growth_mb_max": max(growth) / MB,
            "next_classify_ms_p50": float(np.median(latency)),
        }
    finally:
        channel.close()
        proc.terminate()
        proc.wait(30)


def check_cost(repeat: int = 2000) -> dict[str, float]:
    """Microseconds per size read of a 768x576 JPEG: our SOF parser against Pillow."""
    import io

    import cv2
    from PIL import Image

    data = cv2.imencode(".jpg", np.full((576, 768, 3), 90, np.uint8))[1].tobytes()

    def sof() -> object:
        return jpeg_size(data)

    def pillow() -> object:
        return Image.open(io.BytesIO(data)).size

    out = {}
    for name, fn in (("sof_parser_us", sof), ("pillow_open_us", pillow)):
        fn()
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        out[name] = (time.perf_counter() - t) / repeat * 1e6
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench hostile`'s options."""
    p.add_argument("--rounds", type=int, default=20, help="bomb rounds per daemon (20)")
    p.add_argument("--edge-model", default="", help="detector ONNX (default: starter yolov8n)")
    p.add_argument(
        "--cloud-model",
        default="",
        help="classifier ONNX (default: the starter mobilenetv2_imagenet)",
    )
    p.add_argument("--json", default="", help="also write the figures here")


def run(args: argparse.Namespace) -> int:
    """Every probe; the figures as JSON on stdout."""
    tmp = Path(tempfile.mkdtemp(prefix="strata-hostile-"))
    doc = {
        "machine": cpu_line(),
        "loadavg_before": os.getloadavg(),
        "check": check_cost(),
        "edge": edge_probe(tmp, args.edge_model, args.rounds),
        "cloud": cloud_probe(tmp, args.cloud_model, args.rounds),
        "loadavg_after": os.getloadavg(),
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
