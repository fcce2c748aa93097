"""Edge node throughput against the bare runtime, in one run: `strata bench edge`.

For each batch size: (1) the bare back end runs preprocessed batches of that size back to
back (the physical limit of this machine for this model; with several ONNX Runtime CPU
streams, also as one stream on every thread, and the better of the two counts); (2) a
real edge node with the same model, back end, threads and max batch takes frames over
ZeroMQ from DEALER senders (several cameras, each within the credit the node grants, as
agents do) and publishes detections, which a SUB socket counts. The senders and the SUB
run in a process of their own (tools/bench/edge_load.py), so the node's process is the
node alone, as deployed. The ratio of the two frame rates is the node's overhead. Frames
are JPEG at the agent's default quality, scaled to fit the model's input as a default
agent sends them (`--payload source`: the full --width x --height). Latency is sender ->
SUB receipt per frame, at saturation (two batches a slot in flight by default).

`--backend openvino` runs both sides on OpenVINO (throughput hint, one infer request per
stream, each a slot both sides keep busy); `--precision int8` takes the model's INT8
variant for the back end (`int8-openvino` or `int8-onnxruntime` from `strata models
quantize --calibration`, else `int8`). Start-up is measured before the sweep: the runner
opened twice, the first time with an empty OpenVINO cache (cold: compile), the second
from what it wrote (warm); ONNX Runtime has no cache, so both of its opens are cold.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from strata.device.transport.encoder import fit_size
from strata.edge.cli import resolve_model
from strata.edge.inference.detector import CPU_BACKENDS, open_staged
from strata.shared.config.device import SenderConfig
from strata.shared.config.edge import DEFAULT_DETECTOR, EdgeConfig
from strata.shared.contracts import common_pb2
from strata.shared.machine import cpu_line, gpus
from strata.shared.metrics import sample
from strata.shared.models.detector import spec_beside
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision import LetterboxWriter
from strata.tools.bench.detector import variant_key
from strata.tools.bench.edge_load import LoadProcess, LoadSpec
from strata.tools.bench.nodes import start_edge_node


@dataclass(frozen=True, slots=True)
class Point:
    """One batch size's figures."""

    batch: int
    streams: int
    frames: int
    bare_fps: float
    node_fps: float
    ratio: float
    p50_ms: float
    p99_ms: float
    mean_batch: float
    # Median process CPU ms per frame, and bare/node: the node's efficiency measured in
    # CPU time, which other jobs on the machine disturb far less than wall time.
    bare_cpu_ms: float
    node_cpu_ms: float
    cpu_ratio: float
    rounds: dict[str, list[float]]


def bench_frames(width: int, height: int, count: int) -> list[np.ndarray]:
    """Frames of the synthetic clip (objects on a textured background)."""
    clip = SyntheticClip(width=width, height=height, frames=max(count, 20), objects=4, seed=3)
    return [clip.frame(i).image for i in range(count)]


class Bare:
    """The back end alone, fed preprocessed batches back to back; slots kept busy on GPU."""

    def __init__(self, model: Path, cfg: EdgeConfig, batch: int, image: np.ndarray) -> None:
        self.batch = batch
        self.runner = open_staged(model, cfg, batch)
        spec = spec_beside(model)
        for slot in range(self.runner.slots):
            buf = self.runner.host_input(slot)
            size = int(buf.shape[2])
            lw = LetterboxWriter(size, spec.preprocess if spec is not None else None)
            for i in range(batch):
                lw.write(image, buf[i])
        self.measure(batch * self.runner.slots)  # warm-up (engines, allocator, caches)

    def measure(self, frames: int) -> tuple[float, float]:
        """Frames/s over `frames` frames, and process CPU ms per frame."""
        r, b = self.runner, self.batch
        runs = max(1, frames // b)
        pending: deque[int] = deque()
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(runs):
            if len(pending) == r.slots:
                r.wait(pending.popleft(), b)
            slot = r.acquire()
            r.launch(slot, b)
            pending.append(slot)
        while pending:
            r.wait(pending.popleft(), b)
        wall = time.perf_counter() - t0
        return runs * b / wall, (time.process_time() - c0) * 1e3 / (runs * b)

    def close(self) -> None:
        self.runner.close()


@dataclass(frozen=True, slots=True)
class NodeRun:
    """One measurement of the node."""

    fps: float
    latencies_s: list[float]
    mean_batch: float
    # The node's process CPU per frame it took, warm-up included (the load runs apart).
    cpu_ms: float
    # Frames the node answered BUSY: a load within its credits gets only the first grant's.
    busy: int


class NodeHarness:
    """A real edge node (in this process) fed by the bench's load (in its own)."""

    def __init__(
        self,
        model: Path,
        cfg: EdgeConfig,
        images: list[np.ndarray],
        cameras: int,
        encoding: int,
        inflight: int,
    ) -> None:
        self.node, ep = start_edge_node(cfg, model)
        payloads: list[Any] = []
        for img in images:
            if encoding == common_pb2.ENCODING_JPEG:
                import cv2

                quality = SenderConfig().jpeg_quality  # the agent's default
                _ok, jpg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
                payloads.append(jpg.tobytes())
            else:
                payloads.append(np.ascontiguousarray(img))
        h, w = images[0].shape[:2]
        try:
            self.load = LoadProcess(
                LoadSpec(ep.listen, ep.publish, payloads, w, h, cameras, encoding, inflight)
            )
        except BaseException:
            self.node.stop()
            raise
        # The first measurement warms the node up; later ones only need the pipeline full,
        # which the sender's in-flight frames already make it.
        self.warm = max(cameras, cfg.batching.max_batch) * 2
        self.rewarm = cfg.batching.max_batch

    def measure(self, frames: int, timeout_s: float) -> NodeRun:
        """Warm-up plus `frames` frames; the node's CPU and batches over the whole send."""
        reg = self.node.metrics.registry
        nb0 = sample(reg, "strata_edge_batch_size_count")
        nf0 = sample(reg, "strata_edge_batch_size_sum")
        busy0 = sample(reg, "strata_edge_frames_total", {"status": "busy"})
        c0 = time.process_time()
        run = self.load.measure(self.warm, frames, timeout_s)
        cpu_s = time.process_time() - c0
        busy = sample(reg, "strata_edge_frames_total", {"status": "busy"}) - busy0
        nb = sample(reg, "strata_edge_batch_size_count") - nb0
        nf = sample(reg, "strata_edge_batch_size_sum") - nf0
        done = self.warm + frames
        self.warm = self.rewarm
        # This process is the node alone: its CPU over every frame it took.
        return NodeRun(
            run.fps, run.latencies_s, nf / nb if nb else 0.0, cpu_s * 1e3 / done, round(busy)
        )

    def close(self) -> None:
        self.load.close()
        self.node.stop()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench edge`'s options."""
    p.add_argument("--model", default=DEFAULT_DETECTOR, help="repository model name or ONNX path")
    p.add_argument("--repository", default="", help="model repository (default: starter)")
    p.add_argument("--batch", default="1,2,4", help="batch sizes to sweep, comma-separated")
    p.add_argument("--frames", type=int, default=8, help="measured frames per round")
    p.add_argument("--threads", type=int, default=0, help="ORT threads (0: all cores)")
    p.add_argument("--cameras", type=int, default=4, help="cameras (DEALER sockets)")
    p.add_argument(
        "--inflight", type=int, default=0, help="frames in flight (0: 2 batches, >= cameras)"
    )
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--encoding", choices=["jpeg", "bgr"], default="jpeg")
    p.add_argument(
        "--payload",
        choices=["model", "source"],
        default="model",
        help="model: frames scaled to fit the model's input, as a default agent sends them; "
        "source: --width x --height as they are (an agent with scale_to_model off)",
    )
    p.add_argument(
        "--backend",
        default="onnxruntime-cpu",
        help="runtime back end (edge.runtime.backend), e.g. onnxruntime-cpu, openvino",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "int8"],
        default="fp32",
        help="int8: the model's int8-<engine> variant for the back end (int8-openvino, "
        "int8-onnxruntime), else its int8 one (made by `strata models quantize`)",
    )
    p.add_argument(
        "--openvino-device", default="CPU", help="OpenVINO device: CPU, GPU or NPU (openvino)"
    )
    p.add_argument(
        "--openvino-cache",
        default="",
        help="OpenVINO compiled-model cache for the sweep (default: a fresh temporary folder)",
    )
    p.add_argument(
        "--openvino-streams",
        type=int,
        default=0,
        help="OpenVINO streams (edge.runtime.openvino_streams; 0: its choice)",
    )
    p.add_argument("--streams", default="1", help="CUDA streams to sweep (GPU back ends)")
    p.add_argument(
        "--cpu-streams",
        type=int,
        default=1,
        help="ONNX Runtime CPU: batches side by side (edge.runtime.cpu_streams; 0: one a "
        "core plus one)",
    )
    p.add_argument("--preprocess-threads", type=int, default=1, help="letterbox threads")
    p.add_argument("--no-fp16", action="store_true", help="GPU engines in FP32")
    p.add_argument("--delay-ms", type=float, default=50.0, help="batching max queue delay")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per node run")
    p.add_argument("--rounds", type=int, default=6, help="alternating bare/node rounds")
    p.add_argument(
        "--engine-profile",
        type=_profile,
        default=None,
        metavar="MIN,OPT,MAX",
        help="one optimization profile for every point (GPU engines built once)",
    )
    p.add_argument("--json", metavar="OUT", help="write the results here")
    p.add_argument(
        "--quick", action="store_true", help="batch 1,2, 6 frames, 1 round (for strata bench)"
    )


def _profile(text: str) -> tuple[int, int, int]:
    lo, opt, hi = (int(x) for x in text.split(","))
    if not 1 <= lo <= opt <= hi:
        raise argparse.ArgumentTypeError("need MIN <= OPT <= MAX, all at least 1")
    return lo, opt, hi


def _config(
    args: argparse.Namespace, threads: int, streams: int, b: int, inflight: int
) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "runtime": {
                "backend": args.backend,
                "threads": threads,
                "cpu_streams": args.cpu_streams,
                "streams": streams,
                "fp16": not args.no_fp16,
                "preprocess_threads": args.preprocess_threads,
                "openvino_device": args.openvino_device,
                "openvino_cache": args.openvino_cache,
                "openvino_streams": args.openvino_streams,
                # One engine for the whole sweep when asked (a TensorRT build per batch size
                # would take most of a GPU check's time).
                "min_batch": args.engine_profile[0] if args.engine_profile else 1,
                "opt_batch": args.engine_profile[1] if args.engine_profile else b,
                "max_batch": args.engine_profile[2] if args.engine_profile else b,
            },
            # Degradation off: the sweep measures each batch size as configured.
            "batching": {
                "max_batch": b,
                "max_queue_delay_ms": args.delay_ms,
                "queue_per_camera": inflight,
                "delay_target_ms": 0,
            },
        }
    )


def _one_stream(
    args: argparse.Namespace, model: Path, cfg: EdgeConfig, b: int, image: np.ndarray, slots: int
) -> Bare | None:
    """Several CPU streams: the bare model also as one stream on every thread, the best a
    bare session does here; the node is held to the better of the two."""
    if slots <= 1 or args.backend != "onnxruntime-cpu":
        return None
    rt = cfg.runtime.model_copy(update={"cpu_streams": 1})
    return Bare(model, cfg.model_copy(update={"runtime": rt}), b, image)


def _point(
    args: argparse.Namespace,
    model: Path,
    images: list[np.ndarray],
    threads: int,
    streams: int,
    b: int,
) -> tuple[Point, list[float]]:
    """One (streams, batch) point and its per-frame latencies in ms."""
    encoding = common_pb2.ENCODING_JPEG if args.encoding == "jpeg" else common_pb2.ENCODING_BGR
    cfg = _config(args, threads, streams, b, args.inflight or 1)
    # Alternate bare and node runs: other load on the machine then hits both alike instead
    # of whichever ran during a busy spell.
    bare = Bare(model, cfg, b, images[0])
    # Two batches a slot in flight (CPU streams, OpenVINO infer requests, CUDA streams).
    slots = bare.runner.slots
    inflight = args.inflight or max(2 * b * slots, args.cameras)
    cfg = _config(args, threads, streams, b, inflight)
    one = _one_stream(args, model, cfg, b, images[0], slots)
    node = NodeHarness(model, cfg, images, args.cameras, encoding, inflight)
    try:
        bare_runs, one_runs, node_runs = [], [], []
        for _ in range(args.rounds):
            bare_runs.append(bare.measure(args.frames))
            if one is not None:
                one_runs.append(one.measure(args.frames))
            node_runs.append(node.measure(args.frames, args.timeout))
    finally:
        node.close()
        bare.close()
        if one is not None:
            one.close()
    # Frames over total time across the rounds (the harmonic mean of the rates): with
    # short alternating rounds both sides see the same background load on average.
    same_fps = len(bare_runs) / sum(1.0 / f for f, _c in bare_runs)
    one_fps = len(one_runs) / sum(1.0 / f for f, _c in one_runs) if one_runs else 0.0
    if one_fps > same_fps:
        bare_runs = one_runs
    bare_fps = max(same_fps, one_fps)
    bare_cpu = float(np.median([c for _f, c in bare_runs]))
    node_cpu = float(np.median([r.cpu_ms for r in node_runs]))
    fps = len(node_runs) / sum(1.0 / r.fps for r in node_runs)
    ms = np.array([x for r in node_runs for x in r.latencies_s]) * 1e3
    pt = Point(
        b,
        streams,
        args.frames,
        round(bare_fps, 2),
        round(fps, 2),
        round(fps / bare_fps, 3),
        round(float(np.percentile(ms, 50)), 1),
        round(float(np.percentile(ms, 99)), 1),
        round(float(np.mean([r.mean_batch for r in node_runs])), 2),
        round(bare_cpu, 1),
        round(node_cpu, 1),
        round(bare_cpu / node_cpu, 3),
        {
            "bare_fps_rounds": [round(f, 2) for f, _c in bare_runs],
            "node_fps_rounds": [round(r.fps, 2) for r in node_runs],
            "busy_rounds": [r.busy for r in node_runs],
            "bare_streams_fps": [round(same_fps, 2)],
            "bare_one_stream_fps": [round(one_fps, 2)] if one_runs else [],
        },
    )
    print(
        f"streams {streams} batch {b}: bare {pt.bare_fps:.2f} fps, node {pt.node_fps:.2f} fps, "
        f"ratio {pt.ratio:.3f}, latency p50 {pt.p50_ms} ms p99 {pt.p99_ms} ms, "
        f"mean batch {pt.mean_batch}, CPU ms/frame bare {pt.bare_cpu_ms} node "
        f"{pt.node_cpu_ms} (ratio {pt.cpu_ratio})"
        + (
            f"; bare {same_fps:.2f} as the node's {slots} streams, {one_fps:.2f} as one"
            if one_runs
            else ""
        ),
        flush=True,
    )
    return pt, sorted(round(float(x), 2) for x in ms)


def _doc(
    args: argparse.Namespace,
    model: Path,
    threads: int,
    points: list[Point],
    latencies_ms: dict[tuple[int, int], list[float]],
) -> dict[str, Any]:
    best = max(points, key=lambda q: q.node_fps)
    return {
        "bare_fps": best.bare_fps,
        "node_fps": best.node_fps,
        "ratio": best.ratio,
        "min_ratio": min(q.ratio for q in points),
        "cpu_ratio": best.cpu_ratio,
        "p50_ms": best.p50_ms,
        "p99_ms": best.p99_ms,
        "best_batch": best.batch,
        "sweep": [asdict(q) for q in points],
        # The best point's per-frame latencies, for a CDF.
        "latencies_ms": latencies_ms[(best.streams, best.batch)],
        # Node frames/s with N streams over 1 stream, per batch size (GPU back ends).
        "stream_gain": {
            f"{q.streams}x_b{q.batch}": round(q.node_fps / one.node_fps, 3)
            for q in points
            for one in points
            if one.streams == 1 and one.batch == q.batch and q.streams != 1
        },
        "model": str(model),
        "backend": args.backend,
        "threads": threads,
        "encoding": args.encoding,
        "frame": f"{args.width}x{args.height}",
        "cameras": args.cameras,
        "rounds": args.rounds,
        "inflight": args.inflight or "2 batches",
        "machine": cpu_line(),
        "precision": args.precision,
        "gpu": ", ".join(gpus()) if args.backend not in CPU_BACKENDS else "",
    }


def _model(args: argparse.Namespace) -> Path:
    """The ONNX file: a path, or the repository model (its `int8` variant when asked)."""
    if args.model.endswith(".onnx"):
        if args.precision != "fp32":
            raise SystemExit(
                f"strata bench edge: --precision {args.precision} takes the repository "
                "model's variant; give --model a repository name, or the INT8 file as --model"
            )
        return Path(args.model)
    if args.precision == "fp32":
        return resolve_model(args.model, "", args.repository)
    from strata.shared.models import ModelError, ModelRepository

    repo = ModelRepository(args.repository or None)
    try:
        key = variant_key(repo.manifest(args.model).variants, args.precision, args.backend)
        _manifest, _key, file = repo.file_of(args.model, key)
    except ModelError as exc:
        raise SystemExit(
            f"strata bench edge: {exc}; make the {args.precision} variant first: "
            f"strata models quantize {args.model} (docs/models.md)"
        ) from None
    return file


def startup(model: Path, cfg: EdgeConfig, cache: str) -> dict[str, Any]:
    """Seconds to open the runner (staged, batch buffers allocated), twice: with an empty
    OpenVINO cache (cold) and from what it wrote (warm); both cold for ONNX Runtime."""
    if cfg.runtime.backend == "openvino" and cache and any(Path(cache).iterdir()):
        raise SystemExit(
            f"strata bench edge: the OpenVINO cache {cache} is not empty, so the cold "
            "start-up would not be cold; give an empty folder or leave --openvino-cache out"
        )
    times, cached = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        runner = open_staged(model, cfg, cfg.batching.max_batch)
        times.append(time.perf_counter() - t0)
        cached.append(bool(getattr(runner, "loaded_from_cache", False)))
        runner.close()
    out = {
        "cold_s": round(times[0], 3),
        "warm_s": round(times[1], 3),
        "warm_from_cache": cached[1],
    }
    print(
        f"start-up ({cfg.runtime.backend}): cold {out['cold_s']} s, warm {out['warm_s']} s"
        + (" (loaded from the cache)" if cached[1] else " (no cache)"),
        flush=True,
    )
    return out


def run(args: argparse.Namespace) -> int:
    """The sweep; the best point's figures on stdout, everything in --json."""
    if args.quick:
        args.batch, args.frames, args.rounds = "1,2", 6, 1
    model = _model(args)
    threads = args.threads or (os.cpu_count() or 1)
    own_cache = None
    if args.backend == "openvino" and not args.openvino_cache:
        own_cache = tempfile.TemporaryDirectory(prefix="strata-ov-")
        args.openvino_cache = own_cache.name
    start = startup(model, _config(args, threads, 1, 1, 2), args.openvino_cache)
    images = bench_frames(args.width, args.height, 16)
    if args.payload == "model":
        # What a default agent sends: scaled to fit the model's input as it leaves the
        # decoder (device.payload.scale_to_model), JPEG at the sender's default quality.
        import cv2

        spec = spec_beside(model)
        size = (
            spec.preprocess.size
            if spec is not None
            else _config(args, threads, 1, 1, 2).model.input_size
        )
        w, h = fit_size(args.width, args.height, size, size)
        images = [cv2.resize(im, (w, h), interpolation=cv2.INTER_AREA) for im in images]
    points: list[Point] = []
    latencies_ms: dict[tuple[int, int], list[float]] = {}
    for streams, b in [
        (int(st), int(b)) for st in args.streams.split(",") for b in args.batch.split(",")
    ]:
        pt, latencies_ms[(streams, b)] = _point(args, model, images, threads, streams, b)
        points.append(pt)
    doc = {**_doc(args, model, threads, points, latencies_ms), "startup": start}
    if own_cache is not None:
        own_cache.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("bare_fps", "node_fps", "ratio", "p50_ms", "p99_ms")}))
    return 0
