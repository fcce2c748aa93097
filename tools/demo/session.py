"""`strata demo` once: make the clip, run the pipeline, write the video and the report."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from strata.shared.synthetic import SyntheticClip
from strata.tools.demo import summary as summary_mod
from strata.tools.demo.annotate import annotate_frames, annotate_video
from strata.tools.demo.pipeline import Outcome, PipelineRun, RunOptions
from strata.tools.demo.stack import Camera

_LIVE = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")


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


SYNTHETIC = "synthetic://"
# The built-in clip, paced at its frame rate like a camera (5 fps: what YOLOv8n at 640 keeps
# up with on two CPU cores once the gates have dropped the quiet frames).
SYNTHETIC_PARAMS = {"width": 640, "height": 480, "fps": 5, "objects": 4, "seed": 0}


# Edge queue per camera when a source is a file (see DemoSession.run).
FILE_QUEUE = 100_000


def synthetic_source(frames: int) -> str:
    """The device agent's source string for the built-in clip."""
    query = "&".join(f"{k}={v}" for k, v in {**SYNTHETIC_PARAMS, "frames": frames}.items())
    return f"{SYNTHETIC}?{query}&realtime=1"


def synthetic_clip(source: str) -> SyntheticClip:
    """The clip a synthetic:// source string describes (the same frames the agent makes)."""
    from urllib.parse import parse_qs, urlsplit

    args = {k: v[0] for k, v in parse_qs(urlsplit(source).query).items() if k != "realtime"}
    floats = {"noise"}
    kwargs = {k: float(v) if k in floats else int(v) for k, v in args.items()}
    return SyntheticClip(**kwargs)  # type: ignore[arg-type]


def is_file_source(source: str) -> bool:
    """Files are re-read for the annotated video; live streams are not."""
    return not source.startswith((*_LIVE, SYNTHETIC))


def cameras_for(sources: list[str]) -> list[Camera]:
    """One camera per source, with readable unique ids; FileNotFoundError for a missing file."""
    from strata.tools.demo.cli import camera_id

    cams = []
    for i, src in enumerate(sources):
        if src.startswith(SYNTHETIC):
            cams.append(Camera(f"cam{i}-synthetic", src))
            continue
        if is_file_source(src) and not Path(src).is_file():
            raise FileNotFoundError(f"--source {src}: no such file")
        path = str(Path(src).resolve()) if is_file_source(src) else src
        cams.append(Camera(camera_id(i, src), path))
    return cams


class DemoSession:
    """Runs the demo once; `run()` returns the exit status."""

    def __init__(self, opts: DemoOptions, db_dir: Path) -> None:
        self.opts = opts
        self.db_dir = db_dir
        self.pipeline: PipelineRun | None = None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.pipeline is not None and not self.pipeline.interrupted:
            self.pipeline.interrupted = True
            print("\nstrata demo: stopping; the report follows", file=sys.stderr, flush=True)

    def _progress(self, counts: dict[str, float], received: int, elapsed: float) -> None:
        c = {k: int(v) for k, v in counts.items()}
        line = (
            f"[{elapsed:6.1f}s] device: decoded {c['decoded']} kept {c['sent_to_edge']} "
            f"(motion -{c['dropped_motion']}, gate -{c['dropped_gate']}) | "
            f"edge: detected {c['detected']} boxes {c['boxes']} | "
            f"cloud: classified {c['classified']} events {c['events_stored']}"
        )
        if sys.stderr.isatty():
            print("\r" + line[:150].ljust(150), end="", file=sys.stderr, flush=True)
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
        overrides: dict[str, Any] = {
            "cloud": {"store": {"path": str(self.db_dir / "events.sqlite")}}
        }
        if any(is_file_source(c.source) for c in cameras):
            # A file is read as fast as it decodes, not at camera pace: let the edge queue
            # every kept frame (latency shows the wait) instead of shedding most of them, and
            # keep the batch size (that wait is not a missed delay target).
            overrides["edge"] = {"batching": {"queue_per_camera": FILE_QUEUE, "delay_target_ms": 0}}
        from strata.shared.config.base import merge

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
        if notes:
            report.outputs["notes"] = "; ".join(notes)
        report.write(out / "summary.json")
        print(summary_mod.table(report))
        for key, val in report.outputs.items():
            print(f"{key}: {val}")
        boxes = report.frames.get("boxes", 0.0)
        if not boxes and any(c.source.startswith(SYNTHETIC) for c in o.cameras):
            print(
                "strata demo: no boxes: the detector found nothing in the synthetic clip (the "
                "starter models are untrained or trained for other footage; README, 'Bring real "
                "weights'). Real footage: `python .ci/test_data.py`, then "
                "`strata demo --source data/vtest.mp4`",
                file=sys.stderr,
            )
        if o.error is not None:
            print(f"strata demo: {o.error}", file=sys.stderr)
            return 1
        return 130 if o.interrupted else 0
