"""One demo run: start the stack, watch it, stop it, write the report."""

from __future__ import annotations

import logging
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from ..contracts import analytics_pb2
from . import summary as summary_mod
from .annotate import annotate_video
from .procs import TierExitedError
from .results import DetectionCollector, query_events
from .scrape import Samples
from .stack import Camera, Stack, merge

log = logging.getLogger(__name__)

_LIVE = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")


@dataclass
class DemoOptions:
    """What `strata demo` was asked to do."""

    out: Path
    sources: list[str]
    synthetic_frames: int = 200
    duration_s: float | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    startup_timeout_s: float = 120.0
    # Seconds all counters must stand still, after the device finished, to call it drained.
    quiet_s: float = 2.0
    drain_timeout_s: float = 60.0


class DemoSession:
    """Runs the demo once; `run()` returns the exit status."""

    def __init__(self, opts: DemoOptions, db_dir: Path) -> None:
        self.opts = opts
        self.db_dir = db_dir
        self.interrupted = False
        self.scrapes: dict[str, Samples] = {}
        self.error: TierExitedError | None = None
        self.notes: list[str] = []

    # -- set-up -------------------------------------------------------------------------
    def _cameras(self) -> list[Camera]:
        from .cli import camera_id

        sources = self.opts.sources
        if not sources:
            from ..synthetic import SyntheticClip

            path = self.opts.out / "synthetic.mp4"
            clip = SyntheticClip(width=640, height=480, frames=self.opts.synthetic_frames, seed=0)
            clip.write(path)
            sources = [str(path)]
        cams = []
        for i, src in enumerate(sources):
            is_file = not src.startswith(_LIVE)
            if is_file and not Path(src).is_file():
                raise FileNotFoundError(f"--source {src}: no such file")
            cams.append(Camera(camera_id(i, src), str(Path(src).resolve()) if is_file else src))
        return cams

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if not self.interrupted:
            self.interrupted = True
            print(
                "\nstrata demo: stopping (Ctrl-C again does nothing; report follows)",
                file=sys.stderr,
            )

    # -- the run ------------------------------------------------------------------------
    def run(self) -> int:
        """Start, watch, stop, report."""
        out = self.opts.out
        out.mkdir(parents=True, exist_ok=True)
        try:
            cameras = self._cameras()
        except (OSError, ValueError) as exc:
            print(f"strata demo: {exc}", file=sys.stderr)
            return 2
        extra = {"cloud": {"store": {"path": str(self.db_dir / "events.sqlite")}}}
        stack = Stack(out / "run", cameras, merge(extra, self.opts.overrides))
        collector: DetectionCollector | None = None
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        started = time.monotonic()
        try:
            try:
                stack.write_config()
            except ValueError as exc:
                print(f"strata demo: {exc}", file=sys.stderr)
                return 2
            self._say(f"starting cloud and edge (logs in {stack.workdir})")
            stack.start_servers(self.opts.startup_timeout_s)
            collector = DetectionCollector(stack.publish_address)
            collector.start()
            time.sleep(0.3)  # let the subscription reach the publisher before frames flow
            if not self.interrupted:
                stack.start_device()
                self._say(f"device agent reading {len(cameras)} source(s)")
                self._watch(stack, collector, started)
        except TierExitedError as exc:
            self.error = exc
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                rc = self._finish(stack, collector, cameras, started)
            finally:
                signal.signal(signal.SIGINT, previous)
        return rc

    def _watch(self, stack: Stack, collector: DetectionCollector, started: float) -> None:
        last_print = 0.0
        device_done_at: float | None = None
        last_counts: tuple[float, ...] = ()
        still_since = time.monotonic()
        while not self.interrupted:
            stack.check(allow_exit=("device",))
            got = stack.scrape_all()
            self.scrapes.update(got)
            now = time.monotonic()
            counts = summary_mod.counts(self.scrapes)
            snapshot = (*counts.values(), float(collector.count()))
            if snapshot != last_counts:
                last_counts, still_since = snapshot, now
            if self.opts.progress and now - last_print >= (0.5 if sys.stderr.isatty() else 5.0):
                self._progress(counts, collector.count(), now - started)
                last_print = now
            if self.opts.duration_s is not None and now - started >= self.opts.duration_s:
                self.notes.append(f"stopped after --duration {self.opts.duration_s:g}s")
                break
            if device_done_at is None and not stack.procs["device"].running():
                device_done_at = now
            if device_done_at is not None:
                drained = (
                    counts["detected"] >= counts["edge_accepted"] > 0 or counts["decoded"] == 0
                )
                if drained and now - still_since >= self.opts.quiet_s:
                    break
                if now - device_done_at > self.opts.drain_timeout_s:
                    self.notes.append("the pipeline did not drain in time; reporting what it has")
                    break
            time.sleep(0.25)
        if self.opts.progress:
            print(file=sys.stderr)

    def _progress(self, counts: dict[str, float], received: int, elapsed: float) -> None:
        c = {k: int(v) for k, v in counts.items()}
        line = (
            f"[{elapsed:6.1f}s] device: decoded {c['decoded']} kept {c['sent_to_edge']} "
            f"(motion -{c['dropped_motion']}, gate -{c['dropped_gate']}) | "
            f"edge: detected {c['detected']} boxes {c['boxes']} | "
            f"cloud: classified {c['classified']} events {c['events_stored']}"
        )
        if sys.stderr.isatty():
            print("\r" + line[:160].ljust(160), end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def _say(self, text: str) -> None:
        print(f"strata demo: {text}", file=sys.stderr, flush=True)

    # -- the end ------------------------------------------------------------------------
    def _finish(
        self,
        stack: Stack,
        collector: DetectionCollector | None,
        cameras: list[Camera],
        started: float,
    ) -> int:
        self.scrapes.update(stack.scrape_all())
        events: list[analytics_pb2.Event] = []
        cloud = stack.procs.get("cloud")
        if cloud is not None and cloud.running():
            try:
                events = query_events(stack.cloud_address)
            except Exception as exc:  # the report goes on without the events
                self.notes.append(f"querying the cloud's events failed: {exc}")
        # The device first (no new frames), then a last scrape of what the others finished.
        device = stack.procs.get("device")
        if device is not None:
            device.stop()
            self.scrapes.update(stack.scrape_all())
        if collector is not None:
            collector.stop()
        codes = stack.stop()
        results = collector.frames() if collector is not None else {}
        processes = {
            tier: {"exit_code": code, "log": str(stack.procs[tier].log_path)}
            for tier, code in codes.items()
        }
        sources = [
            {
                "camera": c.id,
                "source": c.source,
                "bytes": Path(c.source).stat().st_size if Path(c.source).is_file() else None,
            }
            for c in cameras
        ]
        report = summary_mod.build(
            sources, self.scrapes, results, events, processes, time.monotonic() - started
        )
        report.interrupted = self.interrupted
        if self.error is not None:
            report.error = str(self.error)
        out = self.opts.out
        for cam in cameras:
            if not Path(cam.source).is_file():
                self.notes.append(f"{cam.id}: a live stream, so no annotated video")
                continue
            seen = [i for (c, i) in results if c == cam.id]
            limit = (max(seen) + 1) if (self.interrupted or self.error) and seen else None
            path = out / f"annotated-{cam.id}.mp4"
            try:
                n = annotate_video(Path(cam.source), cam.id, results, events, path, limit)
                report.outputs[f"annotated:{cam.id}"] = f"{path} ({n} frames)"
            except Exception as exc:  # a broken source must not lose the rest of the report
                self.notes.append(f"{cam.id}: annotating failed: {exc}")
        report.outputs["notes"] = "; ".join(self.notes)
        report.outputs["summary"] = str(out / "summary.json")
        report.write(out / "summary.json")
        print(summary_mod.table(report))
        for key, val in report.outputs.items():
            if val:
                print(f"{key}: {val}")
        if self.error is not None:
            print(f"strata demo: {self.error}", file=sys.stderr)
            return 1
        return 130 if self.interrupted else 0
