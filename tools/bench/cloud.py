"""Classify throughput of `strata cloud` against the bare model, in one run.

Starts `strata cloud` as its own process, sweeps the number of concurrent Classify clients
(each loop bounded in requests and time), reads the batch sizes the batcher formed from the
server's /metrics, and after each point times the bare model session on batches of that size
in this process. Reports throughput, p50/p90/p99 latency and served/bare at each point, and
CPU seconds per image of both (server process plus client threads, against the bare session):
on a machine shared with other jobs the CPU ratio is the steadier figure.

    strata bench cloud --json cloud-bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from strata.shared.config.cloud import CloudConfig, CloudModelConfig
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_model


@dataclass(frozen=True, slots=True)
class Point:
    """One concurrency level of the sweep."""

    concurrency: int
    requests: int
    errors: int
    seconds: float
    served_ips: float
    served_ips_window: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_batch: float
    bare_batch: int
    bare_ips: float
    ratio: float
    served_cpu_ms: float
    bare_cpu_ms: float
    cpu_ratio: float


def _crop_jpeg(width: int, height: int) -> bytes:
    import cv2

    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (height // 8, width // 8, 3), np.uint8)
    img = cv2.resize(img, (width, height), interpolation=cv2.INTER_CUBIC)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    if not ok:
        raise RuntimeError("cannot encode the benchmark crop")
    return bytes(buf)


def _batch_stats(metrics_url: str) -> tuple[float, float]:
    """(sum, count) of strata_cloud_batch_size from the server's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "strata_cloud_batch_size_sum":
                total = s.value
            elif s.name == "strata_cloud_batch_size_count":
                count = s.value
    return total, count


def _load_bare(args: argparse.Namespace) -> tuple[object, int, str]:
    """(runner, input side, description) of the same model the server loads."""
    from strata.shared.runtime import create_runner

    options: dict[str, int | bool] = {"threads": args.threads} if args.threads else {}
    options["spin"] = args.spin
    options["dynamic_block_base"] = args.dynamic_block_base
    if args.model_path:
        runner = create_runner(args.model_path, "onnxruntime-cpu", **options)
        side = runner.inputs[0].shape[2] or 224
        return runner, int(side), f"{args.model_path} (ONNX file)"
    from strata.shared.models import ModelRepository

    loaded = ModelRepository(args.repository).open(
        args.model, "onnxruntime-cpu", variant=None, **options
    )
    m = loaded.manifest
    desc = f"{m.name}: {m.source.architecture}; trained={m.source.trained}"
    return loaded.runner, m.input.height, desc


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, all threads."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bare_ips(
    runner: object, side: int, batch: int, seconds: float, max_runs: int, reps: int = 3
) -> tuple[float, float]:
    """(images per second, CPU seconds per image) of runner.run on a prefilled tensor.

    The best of `reps` windows: the machine is shared, and the bare figure is the limit the
    served figure is held against, so it must not be understated by a noisy moment.
    """
    x = np.random.default_rng(0).standard_normal((batch, 3, side, side)).astype(np.float32)
    run = runner.run  # type: ignore[attr-defined]
    run(x)
    best = 0.0
    images = 0
    cpu0 = time.process_time()
    for _ in range(reps):
        runs = 0
        t0 = time.perf_counter()
        while runs < max_runs and (runs == 0 or time.perf_counter() - t0 < seconds / reps):
            run(x)
            runs += 1
        best = max(best, runs * batch / (time.perf_counter() - t0))
        images += runs * batch
    return best, (time.process_time() - cpu0) / images


def _wait_serving(address: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channel = grpc.insecure_channel(address)
    stub = health_pb2_grpc.HealthStub(channel)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"strata cloud exited with {proc.returncode}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                time.sleep(0.2)
        raise RuntimeError(f"strata cloud did not become SERVING within {timeout}s")
    finally:
        channel.close()


def _drive(
    address: str, image: bytes, clients: int, warmup: float, seconds: float, max_requests: int
) -> tuple[list[list[float]], int, float, int]:
    """Run `clients` closed loops.

    Returns per-client latencies in the window, errors in it, its seconds, and all requests
    answered (warm-up included, for CPU per image).
    """
    import grpc
    from strata.shared.contracts import (
        analytics_pb2,
        analytics_pb2_grpc,
        common_pb2,
        current_version,
    )

    req = analytics_pb2.ClassifyRequest(
        version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=image, top_k=1
    )
    start = time.monotonic() + 0.2
    window_start = start + warmup
    window_end = window_start + seconds
    lat: list[list[float]] = [[] for _ in range(clients)]
    errs = [0] * clients
    done = [0] * clients

    def loop(i: int) -> None:
        channel = grpc.insecure_channel(address)
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        while time.monotonic() < start:
            time.sleep(0.005)
        n = 0
        while n < max_requests:
            t0 = time.monotonic()
            if t0 >= window_end:
                break
            try:
                stub.Classify(req, timeout=60)
                ok = True
            except grpc.RpcError:
                ok = False
            t1 = time.monotonic()
            n += 1
            done[i] += ok
            # A request counts in the window when it completes inside it.
            if window_start <= t1 <= window_end:
                if ok:
                    lat[i].append(t1 - t0)
                else:
                    errs[i] += 1
        channel.close()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(warmup + seconds + 120)
    return lat, sum(errs), seconds, sum(done)


def _write_config(args: argparse.Namespace, folder: Path, metrics_port: int) -> Path:
    """The endpoint's strata.yaml for this run."""
    model_yaml = (
        f"    path: {args.model_path}\n" if args.model_path else f"    name: {args.model}\n"
    )
    path = folder / "strata.yaml"
    path.write_text(
        (f"models:\n  repository: '{args.repository}'\n" if args.repository else "")
        + "logging:\n  level: WARNING\n"
        + f"cloud:\n  workers: 48\n  serving_nice: {args.serving_nice}\n  model:\n"
        + model_yaml
        + (f"    threads: {args.threads}\n" if args.threads else "")
        + f"    spin: {str(args.spin).lower()}\n"
        + f"    dynamic_block_base: {args.dynamic_block_base}\n"
        + f"  max_watchers: {max(16, args.idle_streams)}\n"
        + f"  batcher:\n    max_batch: {args.max_batch}\n"
        + f"    adaptive_close: {str(not args.no_adaptive_close).lower()}\n"
        + f"    max_queue_delay_ms: {args.max_queue_delay_ms}\n    max_queue_size: 256\n"
        + f"  metrics:\n    port: {metrics_port}\n"
    )
    return path


def _point(
    args: argparse.Namespace,
    c: int,
    address: str,
    metrics_url: str,
    proc: subprocess.Popen[bytes],
    bare_side: tuple[object, int],
    image: bytes,
) -> Point:
    """One concurrency: served and bare windows alternate, so both see the same load."""
    runner, side = bare_side
    per_client: list[list[float]] = [[] for _ in range(c)]
    errors = 0
    window = bsum = bcount = served_cpu = 0.0
    bares: list[float] = []
    bare_cpu: list[float] = []
    served_done = 0
    for _ in range(args.rounds):
        s0, n0 = _batch_stats(metrics_url)
        cpu0 = _proc_cpu(proc.pid) + time.process_time()
        got, errs, secs, answered = _drive(
            address, image, c, args.warmup, args.seconds / args.rounds, args.max_requests
        )
        served_cpu += _proc_cpu(proc.pid) + time.process_time() - cpu0
        served_done += answered
        s1, n1 = _batch_stats(metrics_url)
        for mine, new in zip(per_client, got, strict=True):
            mine.extend(new)
        errors += errs
        window += secs
        bsum += s1 - s0
        bcount += n1 - n0
        b = max(1, round(bsum / bcount)) if bcount else 1
        time.sleep(0.3)  # let the server's runtime threads go idle
        ips, cpu = _bare_ips(runner, side, b, args.bare_seconds / args.rounds, args.max_requests)
        bares.append(ips)
        bare_cpu.append(cpu)
    mean_batch = bsum / bcount if bcount else 0.0
    bare = float(np.mean(bares))
    lats = [x for mine in per_client for x in mine]
    # Each closed-loop client completes len/sum(latency) requests a second; their sum is the
    # served rate without the quantization a batch-sized burst of completions at a window
    # edge causes in a plain count over the window.
    served = sum(len(m) / sum(m) for m in per_client if m)
    ms = np.asarray(lats) * 1000 if lats else np.zeros(1)
    return Point(
        concurrency=c,
        requests=len(lats),
        errors=errors,
        seconds=window,
        served_ips=round(served, 2),
        served_ips_window=round(len(lats) / window, 2),
        p50_ms=round(float(np.percentile(ms, 50)), 1),
        p90_ms=round(float(np.percentile(ms, 90)), 1),
        p99_ms=round(float(np.percentile(ms, 99)), 1),
        mean_batch=round(mean_batch, 2),
        bare_batch=max(1, round(mean_batch)),
        bare_ips=round(bare, 2),
        ratio=round(served / bare, 3) if bare else 0.0,
        served_cpu_ms=round(1000 * served_cpu / max(served_done, 1), 2),
        bare_cpu_ms=round(1000 * float(np.mean(bare_cpu)), 2),
        cpu_ratio=round(float(np.mean(bare_cpu)) * max(served_done, 1) / served_cpu, 3)
        if served_cpu
        else 0.0,
    )


def _p99_ms(call: Callable[[], object], n: int) -> tuple[float, float]:
    """(p50, p99) in ms of `n` sequential calls."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    ms = np.asarray(times) * 1000
    return round(float(np.percentile(ms, 50)), 2), round(float(np.percentile(ms, 99)), 2)


def _idle_streams(
    address: str, image: bytes, n: int
) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """Open n idle streams (half WatchEvents, half Uplink) from another process, then time
    Health and Classify (200 sequential calls each) beside them."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from strata.shared.contracts import (
        analytics_pb2,
        analytics_pb2_grpc,
        common_pb2,
        current_version,
    )

    watch = n // 2
    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strata.cloud.client.idle_streams",
            address,
            str(watch),
            str(n - watch),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "ready":
        raise RuntimeError("the idle-stream holder did not open its streams")
    channel = grpc.insecure_channel(address)
    health = health_pb2_grpc.HealthStub(channel)
    stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
    req = analytics_pb2.ClassifyRequest(
        version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=image, top_k=1
    )
    stub.Classify(req, timeout=30)
    h50, h99 = _p99_ms(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=10), 200)
    c50, c99 = _p99_ms(lambda: stub.Classify(req, timeout=30), 200)
    channel.close()
    result: dict[str, object] = {
        "streams": n,
        "health_p50_ms": h50,
        "health_p99_ms": h99,
        "classify_p50_ms": c50,
        "classify_p99_ms": c99,
    }
    print(json.dumps({"idle_streams": result}), flush=True)
    return holder, result


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    """The whole sweep; returns the JSON document."""
    runner, side, model_desc = _load_bare(args)
    image = _crop_jpeg(args.crop_width, args.crop_height)
    tmp = Path(tempfile.mkdtemp(prefix="strata-cloud-bench-"))
    port = free_port()
    mport = free_port()
    while mport == port:
        mport = free_port()
    address = f"127.0.0.1:{port}"
    config = _write_config(args, tmp, mport)
    cmd = [sys.executable, "-m", "strata.tools.cli", "cloud", "--config", str(config)]
    cmd += ["--listen", address, "--db", str(tmp / "events.sqlite")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    points: list[Point] = []
    load_before = os.getloadavg()
    holder: subprocess.Popen[str] | None = None
    idle: dict[str, object] = {}
    try:
        _wait_serving(address, proc, 120)
        if args.idle_streams:
            holder, idle = _idle_streams(address, image, args.idle_streams)
        metrics_url = f"http://127.0.0.1:{mport}/metrics"
        for c in args.concurrency:
            points.append(_point(args, c, address, metrics_url, proc, (runner, side), image))
            print(json.dumps(asdict(points[-1])), flush=True)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(10)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        runner.close()  # type: ignore[attr-defined]
    return _document(args, model_desc, points, load_before, idle)


def _document(
    args: argparse.Namespace,
    model_desc: object,
    points: list[Point],
    load_before: tuple[float, float, float],
    idle: dict[str, object],
) -> dict[str, object]:
    best = max(points, key=lambda p: p.served_ips)
    return {
        "benchmark": "strata cloud Classify concurrency sweep vs bare model session",
        "model": model_desc,
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "settings": {
            "max_batch": args.max_batch,
            "max_queue_delay_ms": args.max_queue_delay_ms,
            "threads": args.threads,
            "spin": args.spin,
            "dynamic_block_base": args.dynamic_block_base,
            "serving_nice": args.serving_nice,
            "crop": f"{args.crop_width}x{args.crop_height} JPEG",
            "rounds": args.rounds,
            "warmup_s": args.warmup,
            "window_s": args.seconds,
            "max_requests_per_client": args.max_requests,
            "adaptive_close": not args.no_adaptive_close,
            "idle_streams": args.idle_streams,
        },
        "idle_streams": idle,
        "sweep": [asdict(p) for p in points],
        "best_concurrency": best.concurrency,
        "bare_ips": best.bare_ips,
        "served_ips": best.served_ips,
        "ratio": best.ratio,
        "p50_ms": best.p50_ms,
        "p99_ms": best.p99_ms,
        "cpu_ratio": best.cpu_ratio,
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench cloud`'s options."""
    p.add_argument("--model", default="mobilenetv2_imagenet", help="repository model name")
    p.add_argument("--repository", default="", help="model repository; empty: the starter one")
    p.add_argument("--model-path", default="", help="an ONNX classifier instead of --model")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads")
    p.add_argument(
        "--spin", action="store_true", help="let idle ONNX Runtime threads spin (both sides)"
    )
    p.add_argument(
        "--dynamic-block-base",
        type=int,
        default=CloudModelConfig().dynamic_block_base,
        help="cloud.model.dynamic_block_base (both sides); default: the config's",
    )
    p.add_argument(
        "--serving-nice",
        type=int,
        default=CloudConfig().serving_nice,
        help="cloud.serving_nice of the server; default: the config's",
    )
    p.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2, 4, 8, 16],
        help="comma-separated client counts",
    )
    p.add_argument("--seconds", type=float, default=8.0, help="measured window per point")
    p.add_argument("--rounds", type=int, default=3, help="served/bare alternations per point")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured lead-in per round")
    p.add_argument(
        "--bare-seconds", type=float, default=4.5, help="bare timing per point, all rounds"
    )
    p.add_argument("--max-requests", type=int, default=5000, help="cap per client per point")
    p.add_argument("--max-batch", type=int, default=8, help="cloud.batcher.max_batch")
    p.add_argument("--max-queue-delay-ms", type=float, default=5.0, help="batcher delay")
    p.add_argument("--crop-width", type=int, default=192)
    p.add_argument("--crop-height", type=int, default=256)
    p.add_argument(
        "--idle-streams",
        type=int,
        default=0,
        help="hold this many idle streams open (half WatchEvents, half Uplink) from another "
        "process during the run, and time Health and Classify beside them",
    )
    p.add_argument(
        "--no-adaptive-close",
        action="store_true",
        help="cloud.batcher.adaptive_close: false (always wait max_queue_delay_ms)",
    )
    p.add_argument("--json", metavar="OUT", help="write the results here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="1 and 4 clients, 2 s windows, 1 round (for strata bench)",
    )


def run(args: argparse.Namespace) -> int:
    """The sweep; the best point on stdout, everything in --json."""
    if args.quick:
        args.concurrency, args.seconds, args.rounds = [1, 4], 2.0, 1
        args.warmup, args.bare_seconds = 0.5, 1.5
    result = run_bench(args)
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(
        f"best at {result['best_concurrency']} clients: {result['served_ips']} img/s served, "
        f"{result['bare_ips']} bare, ratio {result['ratio']}, p50 {result['p50_ms']} ms, "
        f"p99 {result['p99_ms']} ms"
    )
    return 0
