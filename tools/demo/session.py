"""`strata demo` once: make the clip, run the pipeline, write the video and the report."""

from __future__ import annotations

import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from strata.shared.config.base import merge
from strata.tools.demo import summary as summary_mod
from strata.tools.demo.annotate import annotate_frames, annotate_video
from strata.tools.demo.cameras import CameraView
from strata.tools.demo.pipeline import Outcome, PipelineRun, RunOptions
from strata.tools.demo.sources import (
    SYNTHETIC,
    cameras_for,
    is_file_source,
    synthetic_clip,
    synthetic_source,
)
from strata.tools.demo.stack import Camera


@dataclass
class DemoOptions:
    """What `strata demo` was asked to do."""

    out: Path
    sources: list[str]
    synthetic_frames: int = 150
    duration_s: float | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    startup_timeout_s: float = 120.0
    realtime: bool = False  # files paced at their frame rate, like a camera


# Edge queue per camera when a source is a file (see DemoSession.run).
FILE_QUEUE = 100_000


class DemoSession:
    """Runs the demo once; `run()` returns the exit status."""

    def __init__(self, opts: DemoOptions) -> None:
        self.opts = opts
        self.event_store = (opts.out / "events.sqlite").resolve()
        self.pipeline: PipelineRun | None = None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.pipeline is not None and not self.pipeline.interrupted:
            self.pipeline.interrupted = True
            print("\nstrata demo: stopping; the report follows", file=sys.stderr, flush=True)

    def _progress(
        self, counts: dict[str, float], received: int, elapsed: float, cams: list[CameraView]
    ) -> None:
        c = {k: int(v) for k, v in counts.items()}
        line = (
            f"[{elapsed:6.1f}s] device: decoded {c['decoded']} kept {c['sent_to_edge']} "
            f"(motion -{c['dropped_motion']}, gate -{c['dropped_gate']}) | "
            f"edge: detected {c['detected']} boxes {c['boxes']} | "
            f"cloud: classified {c['classified']} events {c['events_stored']}"
        )
        if cams:
            line += " | " + "; ".join(v.describe() for v in cams)
        if sys.stderr.isatty():
            width = max(150, shutil.get_terminal_size().columns - 1)
            print("\r" + line[:width].ljust(width), end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def run(self) -> int:
        """Clip, pipeline, report. 0 done, 1 a daemon died, 2 bad input, 130 Ctrl-C."""
        out = self.opts.out
        out.mkdir(parents=True, exist_ok=True)
        sources = list(self.opts.sources)
        try:
            if not sources:
                sources = [synthetic_source(self.opts.synthetic_frames)]
            cameras = cameras_for(sources)
        except (OSError, ValueError) as exc:
            print(f"strata demo: {exc}", file=sys.stderr)
            return 2
        tty = sys.stderr.isatty()
        options = RunOptions(
            duration_s=self.opts.duration_s,
            startup_timeout_s=self.opts.startup_timeout_s,
            progress_every_s=0.5 if tty else 5.0,
        )
        # The event store stays in the output folder, for `strata cloud query` afterwards.
        overrides: dict[str, Any] = {"cloud": {"store": {"path": str(self.event_store)}}}
        if self.opts.realtime:
            overrides["device"] = {"source": {"realtime": True}}
        elif any(is_file_source(c.source) for c in cameras):
            # A file is read as fast as it decodes, not at camera pace: let the edge queue
            # every kept frame (latency shows the wait) instead of shedding most of them, and
            # keep the batch size (that wait is not a missed delay target).
            overrides["edge"] = {"batching": {"queue_per_camera": FILE_QUEUE, "delay_target_ms": 0}}
        self.pipeline = PipelineRun(
            out / "run",
            cameras,
            merge(overrides, self.opts.overrides),
            options,
            self._progress if self.opts.progress else None,
        )
        # SIGTERM too (a supervisor or a test timeout): the daemons live in their own sessions,
        # so only the demo can stop them.
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        previous_term = signal.signal(signal.SIGTERM, self._on_sigint)
        try:
            try:
                outcome = self.pipeline.execute()
            except ValueError as exc:  # a config override that does not validate
                print(f"strata demo: {exc}", file=sys.stderr)
                return 2
            if self.opts.progress and tty:
                print(file=sys.stderr)
            # A second Ctrl-C must not cut the report short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            return self._report(outcome)
        finally:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term)

    def _source_bytes(self, cam: Camera) -> int | None:
        """A file's size; the synthetic clip's size as H.264 (written next to the report)."""
        if cam.source.startswith(SYNTHETIC):
            path = synthetic_clip(cam.source).write(self.opts.out / f"source-{cam.id}.mp4")
            return path.stat().st_size
        path = Path(cam.source)
        return path.stat().st_size if path.is_file() else None

    def _caveats(self, o: Outcome) -> list[str]:
        """What a reader of the figures must know: latencies of a file read faster than
        real time."""
        out = []
        files = [c.id for c in o.cameras if is_file_source(c.source)]
        if files and not self.opts.realtime:
            out.append(
                f"{', '.join(files)}: a file is read as fast as it decodes, so the latencies "
                "above are mostly queueing at the edge, not what a camera would see; "
                "--realtime paces the file at its frame rate"
            )
        return out

    def _report(self, o: Outcome) -> int:
        out = self.opts.out
        notes = list(o.notes)
        processes = {
            tier: {"exit_code": code, "log": str(o.logs[tier])}
            for tier, code in o.exit_codes.items()
        }
        sources = [
            {"camera": c.id, "source": c.source, "bytes": self._source_bytes(c)} for c in o.cameras
        ]
        report = summary_mod.build(sources, o.scrapes, o.results, o.events, processes, o.duration_s)
        report.interrupted = o.interrupted
        report.error = str(o.error) if o.error is not None else None
        for cam in o.cameras:
            synthetic = cam.source.startswith(SYNTHETIC)
            if not synthetic and not Path(cam.source).is_file():
                notes.append(f"{cam.id}: a live stream, so no annotated video")
                continue
            seen = [i for (c, i) in o.results if c == cam.id]
            cut = o.interrupted or o.error is not None
            limit = (max(seen) + 1) if cut and seen else (0 if cut else None)
            path = out / f"annotated-{cam.id}.mp4"
            try:
                if synthetic:
                    clip = synthetic_clip(cam.source)
                    frames = (f.image for f in clip)
                    n = annotate_frames(frames, clip.fps, cam.id, o.results, o.events, path, limit)
                else:
                    n = annotate_video(Path(cam.source), cam.id, o.results, o.events, path, limit)
                report.outputs[f"video {cam.id}"] = f"{path} ({n} frames)"
            except Exception as exc:  # a source that fails to decode must not lose the report
                notes.append(f"{cam.id}: annotating failed: {exc}")
        report.outputs["summary"] = str(out / "summary.json")
        report.outputs["logs"] = str(self.pipeline.stack.workdir if self.pipeline else out)
        report.outputs["events"] = str(self.event_store)
        report.notes = [*notes, *self._caveats(o)]
        report.write(out / "summary.json")
        print(summary_mod.table(report))
        for key, val in report.outputs.items():
            print(f"{key}: {val}")
        print(f"read the stored events: strata cloud query --db {self.event_store} --limit 20")
        for note in report.notes:
            print(f"strata demo: note: {note}", file=sys.stderr)
        if o.error is not None:
            print(f"strata demo: {o.error}", file=sys.stderr)
            return 1
        return 130 if o.interrupted else 0
