"""One run of the three daemons over some cameras: start, watch until drained, stop, collect."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.shared.config import load_config
from strata.shared.config.base import merge
from strata.shared.contracts import analytics_pb2
from strata.tools.demo import summary
from strata.tools.demo.cameras import CameraView, camera_views
from strata.tools.demo.names import COUNTS
from strata.tools.demo.procs import TierExitedError
from strata.tools.demo.results import (
    DetectionCollector,
    Received,
    query_events,
    subscriber_keys,
)
from strata.tools.demo.scrape import Samples
from strata.tools.demo.stack import Camera, Stack

log = logging.getLogger(__name__)

# (frame counts, results received, seconds since start, each camera's state)
Progress = Callable[[dict[str, float], int, float, list[CameraView]], None]


@dataclass
class RunOptions:
    """How long to wait for what."""

    duration_s: float | None = None
    startup_timeout_s: float = 120.0
    # Seconds all counters must stand still, after the device finished, to call it drained.
    quiet_s: float = 2.0
    drain_timeout_s: float = 60.0
    progress_every_s: float = 5.0


@dataclass
class Outcome:
    """What a run produced."""

    cameras: list[Camera]
    results: dict[tuple[str, int], Received]
    events: list[analytics_pb2.Event]
    scrapes: dict[str, Samples]
    exit_codes: dict[str, int | None]
    logs: dict[str, Path]
    duration_s: float
    # Wall-clock seconds from the device's start to the last frame's result.
    processing_s: float
    interrupted: bool
    error: TierExitedError | None
    notes: list[str] = field(default_factory=list)


class PipelineRun:
    """Cloud, edge and device processes over `cameras`; `execute()` runs them once."""

    def __init__(
        self,
        workdir: Path,
        cameras: list[Camera],
        overrides: dict[str, Any] | None = None,
        options: RunOptions | None = None,
        progress: Progress | None = None,
    ) -> None:
        extra = {"cloud": {"store": {"path": str(workdir / "events.sqlite")}}}
        self.stack = Stack(workdir, cameras, merge(extra, overrides or {}))
        self.options = options or RunOptions()
        self.progress = progress
        self.interrupted = False  # set from a signal handler to stop early
        self.scrapes: dict[str, Samples] = {}
        self.notes: list[str] = []

    def say(self, text: str) -> None:
        """A status line on stderr (when progress is shown)."""
        if self.progress is not None:
            print(f"strata demo: {text}", file=sys.stderr, flush=True)

    def execute(self) -> Outcome:
        """Run to the end of the sources (or duration, or interruption); always stops all."""
        stack = self.stack
        stack.write_config()  # a bad override is a ValueError here, before any process
        db = Path(stack.config()["cloud"]["store"]["path"])
        if db.exists():
            db.unlink()  # a fresh event store per run
        collector: DetectionCollector | None = None
        error: TierExitedError | None = None
        started = time.monotonic()
        device_started_ns = time.time_ns()
        try:
            self.say(f"starting cloud and edge (logs in {stack.workdir})")
            stack.start_servers(self.options.startup_timeout_s)
            keys = subscriber_keys(load_config(None, stack.config()))
            collector = DetectionCollector(stack.publish_address, keys)
            collector.start()
            time.sleep(0.3)  # let the subscription reach the publisher before frames flow
            if not self.interrupted:
                device_started_ns = time.time_ns()
                stack.start_device()
                self.say(f"device agent reading {len(stack.cameras)} source(s)")
                self._watch(collector, started)
        except TierExitedError as exc:
            error = exc
        finally:
            outcome = self._stop(collector, started, device_started_ns, error)
        return outcome

    def _watch(self, collector: DetectionCollector, started: float) -> None:
        stack, opts = self.stack, self.options
        last_print = 0.0
        device_done_at: float | None = None
        last_snapshot: tuple[float, ...] = ()
        still_since = time.monotonic()
        while not self.interrupted:
            stack.check(allow_exit=("device",))
            self.scrapes.update(stack.scrape_all())
            now = time.monotonic()
            counts = summary.counts(self.scrapes)
            received = collector.count()
            snapshot = (*counts.values(), float(received))
            if snapshot != last_snapshot:
                last_snapshot, still_since = snapshot, now
            if self.progress is not None and now - last_print >= opts.progress_every_s:
                cams = camera_views(self.scrapes.get("device"), time.time())
                self.progress(counts, received, now - started, cams)
                last_print = now
            if opts.duration_s is not None and now - started >= opts.duration_s:
                self.notes.append(f"stopped after {opts.duration_s:g}s (--duration)")
                break
            if device_done_at is None and not stack.procs["device"].running():
                device_done_at = now
                final = stack.final_metrics("device")
                if final is not None:
                    self.scrapes["device"] = final
            if device_done_at is not None:
                edge = self.scrapes.get("edge")
                queued = (
                    edge.total("strata_edge_queue_depth")
                    + edge.total("strata_edge_crop_queue_depth")
                    if edge is not None
                    else 0.0
                )
                if queued == 0 and now - still_since >= opts.quiet_s:
                    break
                if now - device_done_at > opts.drain_timeout_s:
                    self.notes.append("the pipeline did not drain in time; reporting what it has")
                    break
            time.sleep(0.25)

    def _settle(self, collector: DetectionCollector | None, timeout: float = 5.0) -> None:
        """Last scrapes, until the edge's count of published frames matches what arrived.

        The edge publishes a frame before it counts it, so a scrape can be one behind.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.scrapes.update(self.stack.scrape_all(timeout=3.0))
            if collector is None or self.interrupted or time.monotonic() > deadline:
                return
            edge = self.scrapes.get("edge")
            if edge is None or summary.value(self.scrapes, COUNTS["detected"]) >= collector.count():
                return
            time.sleep(0.1)

    def _stop(
        self,
        collector: DetectionCollector | None,
        started: float,
        device_started_ns: int,
        error: TierExitedError | None,
    ) -> Outcome:
        stack = self.stack
        self._settle(collector)
        events: list[analytics_pb2.Event] = []
        cloud = stack.procs.get("cloud")
        if cloud is not None and cloud.running():
            try:
                events = query_events(stack.cloud_address)
            except Exception as exc:  # the report goes on without the events
                self.notes.append(f"querying the cloud's events failed: {exc}")
        device = stack.procs.get("device")
        if device is not None:
            device.stop()  # no new frames; then a last look at what the others finished
            self.scrapes.update(stack.scrape_all(timeout=3.0))
            final = stack.final_metrics("device")
            if final is not None:
                self.scrapes["device"] = final
        if collector is not None:
            collector.close()
            if collector.malformed:
                self.notes.append(
                    f"{collector.malformed} messages on the edge's results socket did not "
                    "parse as FrameDetections (skipped)"
                )
        codes = stack.stop()
        for tier, code in codes.items():
            # 0: a clean stop; 130 or -2: it ended on the SIGINT the stop sends.
            if code not in (0, 130, -2, None) and (error is None or error.name != tier):
                self.notes.append(f"{tier} did not stop cleanly (exit status {code})")
        results = collector.frames() if collector is not None else {}
        last = max((r.received_ns for r in results.values()), default=0)
        processing = max(0.0, (last - device_started_ns) / 1e9) if results else 0.0
        return Outcome(
            cameras=list(stack.cameras),
            results=results,
            events=events,
            scrapes=dict(self.scrapes),
            exit_codes=codes,
            logs={t: p.log_path for t, p in stack.procs.items()},
            duration_s=time.monotonic() - started,
            processing_s=processing,
            interrupted=self.interrupted,
            error=error,
            notes=list(self.notes),
        )
