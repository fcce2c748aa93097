"""Cameras per edge node: the figure that sizes a site (issue 40).

    strata bench capacity [--profile vtest --profile quiet] [--cascade on --cascade off]
        [--backend onnxruntime-cpu] [--model-repository DIR --model NAME] [--json OUT]

For each profile (vtest: people walking all the time; quiet: vtest's passages between long
stretches of its empty street; both 10 fps, `--frames` of them):

1. Record (tools/bench/capacity_record.py): the real device agent plays the clip at its
   frame rate into the real edge, through a proxy that keeps everything it sends, once
   with the cascade on (as shipped: accuracy target, JPEG at the model's input, the edge's
   tracker answering dropped frames) and once off (every frame sent). The detector on
   every frame is the reference. The device agent runs here, as its own process, on the
   same cores; its CPU seconds per camera-second are reported apart (`device_cpu`), and
   the replay's own CPU beside each trial.
2. Search (tools/bench/capacity_search.py): N rotated copies of the recording replayed into
   a fresh real `strata edge` process (tools/bench/capacity_replay.py, the device's credit
   and BUSY handling), doubling then bisection, bounded by `--limit` cameras,
   `--max-trials` and `--budget` seconds per search. N is carried when every camera's box
   F1 against the reference is at least `--target` (the device's cascade target less the
   cascade bench's slack) and the p99 from capture to the result of a detected frame is
   under `--max-p99` seconds. Frames held back by back-pressure are dropped at the source
   after `--hold` seconds and answered by the edge's tracker: they cost accuracy, which is
   what is judged, not a loss by themselves.

Beside it, the baseline (tools/bench/capacity_baseline.py): the same detector on every
frame with supervision's ByteTrack and LineZone, in `--baseline-python` (an interpreter
with supervision; it is not a strata dependency). The back end and model are passed to
every edge (`--backend`, `--model-repository`, `--model`), so OpenVINO runs need no change.

Figures need a machine with nothing else running; a run on a shared machine says so
(load averages in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from strata.shared.config.base import merge
from strata.shared.config.device import CascadeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.loopback import free_port
from strata.shared.machine import cpu_model
from strata.shared.wire import pack_frame, unpack_ack
from strata.tools.bench.capacity_replay import Recording, Replay, Trial, TrialRules
from strata.tools.bench.capacity_search import SearchResult, SearchRules, most_cameras
from strata.tools.bench.detector import BenchDetector, variant_key
from strata.tools.bench.progress import say
from strata.tools.bench.promise import TARGET_SLACK

STRATA = [sys.executable, "-m", "strata.tools.cli"]
PROFILES = ("vtest", "quiet")


class EdgeServer:
    """A `strata edge` process (or any command speaking its protocol) on fresh ports."""

    def __init__(self, workdir: Path, edge: dict[str, Any], command: list[str] | None = None):
        self.listen = f"tcp://127.0.0.1:{free_port()}"
        self.publish = f"tcp://127.0.0.1:{free_port()}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "edge.log"
        if command is None:
            cfg = workdir / "edge.yaml"
            section = merge(
                edge,
                {
                    "listen": self.listen,
                    "publish": self.publish,
                    "metrics": {"port": free_port()},
                },
            )
            data = {"logging": {"level": "WARNING"}, "edge": section}
            cfg.write_text(yaml.safe_dump(data, sort_keys=False))
            command = [*STRATA, "edge", "--config", str(cfg)]
        else:
            command = [*command, "--listen", self.listen, "--publish", self.publish]
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu_s = 0.0

    def __enter__(self) -> EdgeServer:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=out)
        self._wait_ready(180.0)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Until the node answers a heartbeat (its model loaded and its sockets bound)."""
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.listen)
        hdr = frame_pb2.FrameHeader(
            agent_id="capacity", session_id=1, kind=frame_pb2.FRAME_KIND_HEARTBEAT
        )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the edge exited ({self.proc.returncode}); see {self.log}")
                sock.send_multipart(pack_frame(hdr, b""))
                if sock.poll(1000):
                    unpack_ack(sock.recv_multipart())
                    return
            raise RuntimeError(f"the edge did not answer within {timeout:.0f} s; see {self.log}")
        finally:
            ctx.destroy(linger=0)

    def _cpu(self) -> float:
        assert self.proc is not None
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return self.cpu_s
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *_exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.cpu_s = self._cpu()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def capacity_trial(
    rec: Recording, cameras: int, edge: dict[str, Any], workdir: Path, rules: TrialRules
) -> tuple[Trial, float]:
    """One trial on a fresh edge: the replay's verdict and the edge's CPU seconds."""
    with EdgeServer(workdir / f"n{cameras}", edge) as server:
        trial = Replay(rec, cameras, server.listen, server.publish).run(rules)
    return trial, server.cpu_s


def search(
    rec: Recording,
    edge: dict[str, Any],
    workdir: Path,
    rules: TrialRules,
    bounds: SearchRules,
) -> tuple[SearchResult[Trial], list[float]]:
    """The most cameras of `rec` one edge carries; the edge's CPU seconds per trial."""
    cpu: list[float] = []

    def trial(n: int) -> Trial:
        t, c = capacity_trial(rec, n, edge, workdir, rules)
        cpu.append(c)
        say(
            f"{rec.profile} cascade {'on' if rec.cascade else 'off'}: {n} cameras "
            f"{'carried' if t.carried else 'NOT carried'} (worst F1 {t.worst_f1:.3f}, p99 "
            f"{t.p99_s:.2f} s, held back and dropped {t.held_dropped}, BUSY {t.busy}"
            f"{'; ' + t.why if t.why else ''})"
        )
        return t

    return most_cameras(trial, bounds), cpu


def edge_section(args: argparse.Namespace, detector: dict[str, Any]) -> dict[str, Any]:
    """The edge every trial starts: defaults, the bench's detector and back end, the
    cascade's answers (tracker interpolation); GPU pressure off (a GPU lever: a shared
    CPU's inference p99 trips it into answers from cache)."""
    from strata.tools.bench.cascade import CASCADE

    runtime: dict[str, Any] = {"backend": args.backend}
    if args.threads:
        runtime["threads"] = args.threads
    if args.cpu_streams is not None:
        runtime["cpu_streams"] = args.cpu_streams
    if args.openvino_streams is not None:
        runtime["openvino_streams"] = args.openvino_streams
    edge = merge(CASCADE["edge"], detector.get("edge", {}))
    return merge(edge, {"runtime": runtime, "overload": {"gpu_pressure": {"enabled": False}}})


R = TypeVar("R")


def kept(path: Path, what: str, make: Callable[[], R]) -> R:
    """`make()`, kept in `path` for the next run over the same --work folder (which then
    replays the same recordings: every back end judged on the same device decisions)."""
    if path.is_file():
        say(f"{what}: reused from {path}")
        return cast(R, pickle.loads(path.read_bytes()))
    say(f"{what} ...")
    out = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(out))
    return out


def with_variant(detector: BenchDetector, precision: str, backend: str) -> BenchDetector:
    """`detector` loading its `precision` variant's file for `backend` (fp32: the model's
    own); ModelError when the repository has no such variant."""
    if precision == "fp32":
        return detector
    from strata.shared.models import ModelRepository

    repo = ModelRepository(detector.repository)
    key = variant_key(repo.manifest(detector.name).variants, precision, backend)
    _manifest, _key, path = repo.file_of(detector.name, key)
    return replace(detector, path=path.resolve(), precision=precision)


def mode_result(
    rec: Recording, found: SearchResult[Trial], edge_cpu: list[float]
) -> dict[str, Any]:
    """One profile and cascade setting's figures, said on stderr too."""
    clip_s = rec.frames / rec.fps
    mode = "on" if rec.cascade else "off"
    device_cores = rec.device_cpu_s / clip_s if clip_s else 0.0
    say(
        f"{rec.profile} cascade {mode}: {found.most} cameras per edge node "
        f"({'exact' if found.exact else 'stopped: ' + found.stopped}); the device agent "
        f"costs {device_cores:.3f} cores a camera, apart"
    )
    return {
        "cameras": found.most,
        "exact": found.exact,
        "stopped": found.stopped,
        "least_failed": found.least_failed,
        "search_s": found.seconds,
        "kept_share": rec.kept_share,
        "messages_per_camera": len(rec.messages),
        "device_cpu": {
            "where": "a strata device process on this machine, one camera, while recording",
            "cpu_s": rec.device_cpu_s,
            "cores_per_camera": device_cores,
        },
        "trials": [
            {**asdict(t), "edge_cpu_s": c} for t, c in zip(found.trials, edge_cpu, strict=True)
        ],
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench capacity`'s options."""
    p.add_argument("--profile", action="append", choices=PROFILES, help="repeatable; default both")
    p.add_argument(
        "--cascade", action="append", choices=("on", "off"), help="repeatable; default both"
    )
    p.add_argument("--vtest", metavar="FILE", help="the real clip (default: data/vtest.mp4)")
    p.add_argument("--frames", type=int, default=300, help="frames of each clip (300: 30 s)")
    p.add_argument("--limit", type=int, default=128, help="most cameras tried")
    p.add_argument("--max-trials", type=int, default=10, help="most trials per search")
    p.add_argument(
        "--start", type=int, default=1, help="cameras of the first trial (the doubling's start)"
    )
    p.add_argument(
        "--budget", type=float, default=900.0, help="seconds per search (checked before each trial)"
    )
    p.add_argument(
        "--target",
        type=float,
        default=CascadeConfig().target - TARGET_SLACK,
        help="box F1 every camera must keep (default: the cascade's target less the "
        "cascade bench's slack)",
    )
    p.add_argument("--max-p99", type=float, default=1.0, help="capture-to-result p99 bound (s)")
    p.add_argument("--hold", type=float, default=1.0, help="seconds a held-back frame waits")
    p.add_argument("--backend", default="onnxruntime-cpu", help="edge.runtime.backend")
    p.add_argument("--threads", type=int, default=0, help="edge.runtime.threads (0: default)")
    p.add_argument(
        "--cpu-streams",
        type=int,
        default=None,
        help="edge.runtime.cpu_streams (ONNX Runtime CPU batches side by side; 0: a core "
        "plus one; default: the edge's)",
    )
    p.add_argument(
        "--openvino-streams",
        type=int,
        default=None,
        help="edge.runtime.openvino_streams (default: the edge's, OpenVINO's own choice)",
    )
    p.add_argument("--model-repository", default="", help="the detector's repository")
    p.add_argument("--model", default="", help="the detector (default: the edge's default)")
    p.add_argument(
        "--precision",
        default="fp32",
        help="the model's variant (int8: made by `strata models quantize`); fp32: its own file",
    )
    p.add_argument(
        "--baseline-python",
        default=sys.executable,
        help="interpreter with supervision for the baseline (tools/bench/capacity_baseline.py)",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the supervision baseline")
    p.add_argument(
        "--work",
        type=Path,
        help="work folder (default: a temp dir); one from an earlier run replays its "
        "recordings and reference again (another back end, the same device decisions)",
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--quick", action="store_true", help="60 frames, limit 4, 4 trials")


def _baseline(args: argparse.Namespace, clip: Path, frames: int) -> dict[str, Any]:
    cmd = [
        args.baseline_python,
        "-m",
        "strata.tools.bench.capacity_baseline",
        "--clip",
        str(clip),
        "--frames",
        str(frames),
        "--backend",
        args.backend,
        "--model",
        args.model or "picodet_s_416",
    ]
    if args.model_repository:
        cmd += ["--model-repository", args.model_repository]
    if args.precision != "fp32":
        cmd += ["--variant", args.precision]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    out: dict[str, Any] = json.loads(done.stdout)
    out["command"] = " ".join(cmd)
    return out


def _bounds(args: argparse.Namespace) -> SearchRules | None:
    """The search's bounds from the options (`--quick` shrinks them); None: said why."""
    if args.quick:
        args.frames, args.limit, args.max_trials = 60, 4, 4
        args.start = min(args.start, args.limit)
    try:
        return SearchRules(args.limit, args.max_trials, args.budget, args.start)
    except ValueError as exc:
        say(f"{exc}: set --start, --limit, --max-trials and --budget within those")
        return None


def run(args: argparse.Namespace) -> int:
    """Every profile and cascade setting; 2 when the clip or the detector is missing."""
    from strata.shared.config.edge import DEFAULT_DETECTOR
    from strata.shared.models import ModelError
    from strata.tools import cascade_clips
    from strata.tools.bench.capacity_record import record, reference_run
    from strata.tools.bench.detector import resolve
    from strata.tools.clips import find_vtest

    vtest = find_vtest(args.vtest)
    if vtest is None or not vtest.is_file():
        say("data/vtest.mp4 missing; run `python .ci/test_data.py`")
        return 2
    try:
        detector = resolve(args.model_repository, args.model or DEFAULT_DETECTOR)
    except ModelError as exc:
        say(f"the detector: {exc}")
        return 2
    # The reference and the recordings are the FP32 model's on the default back end (the
    # same device decisions for every back end); the searched edges load the variant.
    base = detector
    try:
        detector = with_variant(detector, args.precision, args.backend)
    except ModelError as exc:
        say(
            f"the detector: {exc}; make the {args.precision} variant first: strata models "
            f"quantize {detector.name} (docs/models.md)"
        )
        return 2
    bounds = _bounds(args)
    if bounds is None:
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="strata-capacity-"))
    rules = TrialRules(target_f1=args.target, max_p99_s=args.max_p99, hold_s=args.hold)
    edge = edge_section(args, detector.overrides())
    result: dict[str, Any] = {
        "command": getattr(args, "command_line", "strata bench capacity"),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "load_avg_1m_at_start": os.getloadavg()[0],
        },
        "detector": detector.describe(),
        "backend": args.backend,
        "rules": asdict(rules),
        "search": asdict(bounds),
        "profiles": {},
    }
    for name in args.profile or PROFILES:
        clip = cascade_clips.make(name, vtest, work / "clips", args.frames)
        size = (detector.input_width, detector.input_height)
        ref = kept(
            work / name / "reference.pkl",
            f"{name}: reference run (the detector on every frame)",
            partial(reference_run, clip, work / name / "reference", base.overrides(), size),
        )
        prof: dict[str, Any] = {"clip": clip.name, "frames": len(ref[1])}
        for mode in args.cascade or ("on", "off"):
            on = mode == "on"
            folder = work / name / f"record-{mode}"
            rec = kept(
                work / name / f"record-{mode}.pkl",
                f"{name}: recording the device agent, cascade {mode}",
                partial(record, clip, folder, base.overrides(), on, ref),
            )
            found, edge_cpu = search(rec, edge, work / name / f"search-{mode}", rules, bounds)
            prof[f"cascade_{mode}"] = mode_result(rec, found, edge_cpu)
        if not args.no_baseline:
            prof["baseline"] = _baseline(args, clip, args.frames)
            say(f"{name} baseline (supervision): {prof['baseline']}")
        result["profiles"][name] = prof
    result["machine"]["load_avg_1m_at_end"] = os.getloadavg()[0]
    text = json.dumps(result, indent=2, default=str)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    return 0
