"""The cascade's accuracy and bytes on the bench's clips: `strata bench cascade`.

The synthetic clip first (its ground truth is known), then, when vtest is present, vtest and
the clips made from it (quiet footage, pans and cuts: tools/cascade_clips.py; `--clip`
chooses), then any `--footage` of the user's own: each through
a reference run (the detector on every frame) and a cascade run of the real daemons over
loopback (tools/bench/cascade.py), compared frame by frame, with the edge's detector of
choice (`--model-repository`, `--model`: tools/bench/detector.py). Writes the cascade.*
keys of `strata bench`'s report and, per clip, the figures and whether the cascade kept its
promise (tools/bench/promise.py), as JSON.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path

from strata.shared import machine
from strata.shared.models import ModelError
from strata.shared.synthetic import SyntheticClip
from strata.tools import cascade_clips
from strata.tools.bench import report
from strata.tools.bench.cascade import (
    ClipResult,
    ClipSetup,
    Labels,
    ReferenceHolesError,
    measure_clip,
    synthetic_truth,
    through_codec_refusal,
)
from strata.tools.bench.clip_args import CLIPS, add_clip_arguments, clips_of
from strata.tools.bench.detector import BenchDetector, resolve
from strata.tools.bench.progress import say
from strata.tools.bench.promise import promise
from strata.tools.clips import find_vtest


@dataclass(frozen=True, slots=True)
class CascadeOptions:
    """What the cascade bench runs: which clips, how much of them, which detector."""

    quick: bool = False
    vtest: Path | None = None
    skip_vtest: bool = False
    clips: tuple[str, ...] = CLIPS
    # > 0: only the first this many frames of every clip (a check that it works, not a
    # figure).
    frames: int = 0
    # The edge's detector; None: the starter repository's default (bench/detector.py).
    detector: BenchDetector | None = None
    # What the cascade run's device sends the edge (clip_args.ENCODINGS).
    encoding: str = "jpeg"
    # Clips of the user's own, run after vtest's (`--footage`).
    footage: tuple[Path, ...] = ()
    # A third run per clip: the reference through the cascade's JPEG (ClipSetup).
    through_codec: bool = False
    # The cascade run's JPEG quality (None: the device's default).
    jpeg_quality: int | None = None
    # > 0: the footage's frames dropped evenly down to about this rate.
    footage_fps: float = 0.0


def run_cascade(work: Path, opts: CascadeOptions) -> list[ClipResult]:
    """The synthetic clip (with ground truth), then the clips made from vtest (`vtest`
    itself, `quiet`, `pans`: tools/cascade_clips.py) when it is present and not quick, then
    the user's `footage` (not when quick)."""
    clips: list[ClipResult] = []
    frames = 30 if opts.quick else 300
    if opts.frames > 0:
        frames = min(frames, opts.frames)
    detector = opts.detector or resolve()
    model = detector.overrides()
    clip = SyntheticClip(width=640, height=480, frames=frames, fps=10, objects=4, seed=0)
    path = clip.write(work / "synthetic.mp4")
    labels = Labels()
    say(f"detector: {detector.one_line()} from {detector.repository}")
    say(f"cascade on the synthetic clip ({frames} frames): reference run, then cascade run ...")
    truth = synthetic_truth(clip, labels)
    size = (detector.input_width, detector.input_height)
    setup = ClipSetup(
        model,
        size,
        encoding=opts.encoding,
        jpeg_quality=opts.jpeg_quality,
        through_codec=opts.through_codec,
    )
    say(f"the cascade run's device sends the edge {opts.encoding} payloads")
    clips.append(measure_clip(path, work / "synthetic", setup, truth, labels))
    if not opts.skip_vtest:
        clips.extend(_vtest_clips(work, opts, setup))
    if not opts.quick:
        for own in opts.footage:
            path = cascade_clips.footage(own, work / "clips", opts.frames, opts.footage_fps)
            clips.append(_measure(path, work / path.stem, setup))
    return clips


def _vtest_clips(work: Path, opts: CascadeOptions, setup: ClipSetup) -> list[ClipResult]:
    """vtest and the clips made from it (`--clip`), when vtest is here and not quick."""
    vtest = opts.vtest
    if vtest is None or not vtest.is_file():
        say("vtest.mp4 not found (python .ci/test_data.py fetches it); cascade on it skipped")
        return []
    if opts.quick:
        say("--quick: cascade on vtest.mp4 skipped (795 frames through two full pipeline runs)")
        return []
    return [
        _measure(cascade_clips.make(name, vtest, work / "clips", opts.frames), work / name, setup)
        for name in opts.clips
    ]


def _measure(path: Path, work: Path, setup: ClipSetup) -> ClipResult:
    """One clip's reference and cascade runs, and its verdict said."""
    third = ", then the reference through the JPEG" if setup.through_codec else ""
    say(f"cascade on {path.name}: reference run, then cascade run{third} ...")
    result = measure_clip(path, work, replace(setup, curve=True))
    say(promise(result).line())
    return result


def holes_doc(holes: ReferenceHolesError) -> dict[str, object]:
    """What the bench prints instead of figures when a reference frame has no answer."""
    return {
        "reference_holes": {
            "clip": holes.clip,
            "frames_without_answer": holes.missing,
            "frames_total": holes.total,
            "drops_by_reason": holes.why,
        }
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench cascade`'s options."""
    p.add_argument("--out", default="bench-out/cascade", metavar="DIR", help="work folder")
    p.add_argument("--quick", action="store_true", help="30 synthetic frames, no vtest")
    p.add_argument("--vtest", metavar="FILE", help="the real clip (default: data/vtest.mp4)")
    p.add_argument(
        "--no-vtest",
        action="store_true",
        help="no clip made from vtest (the synthetic clip and any --footage)",
    )
    add_clip_arguments(p)
    p.add_argument(
        "--footage",
        action="append",
        default=[],
        metavar="FILE",
        help="a clip of your own after vtest's (repeatable): footage the project was not "
        "tuned on, re-encoded H.264 at its own rate (python .ci/test_data.py --unseen writes "
        "four to data/unseen/)",
    )
    p.add_argument(
        "--jpeg-quality",
        type=int,
        default=None,
        metavar="Q",
        help="the cascade run's JPEG quality (default: device.sender.jpeg_quality's)",
    )
    p.add_argument(
        "--footage-fps",
        type=float,
        default=0.0,
        metavar="FPS",
        help="drop --footage's frames evenly down to about this rate, as a camera set to "
        "it (default: the file's own rate)",
    )
    p.add_argument(
        "--uniform-through-codec",
        action="store_true",
        help="a third run per clip, every frame through the cascade's JPEG: uniform spacing "
        "as a user lowering the frame rate would send it, beside uniform on raw frames "
        "(JPEG only)",
    )
    p.add_argument("--json", metavar="OUT", help="write the figures here too")


def run(args: argparse.Namespace) -> int:
    """Both clips' figures as JSON on stdout; 0 when the headline clip has every key, 2
    (and the frames without an answer, by drop reason, instead of figures) when a
    reference run left holes."""
    out = Path(args.out)
    try:
        detector = resolve(args.model_repository, args.model)
    except ModelError as exc:
        say(f"the detector: {exc}")
        return 2
    absent = [f for f in args.footage if not Path(f).is_file()]
    if absent:
        say(
            f"--footage: no such file: {', '.join(absent)} (python .ci/test_data.py --unseen "
            "writes four clips to data/unseen/)"
        )
        return 2
    opts = CascadeOptions(
        quick=args.quick,
        vtest=find_vtest(args.vtest),
        skip_vtest=args.no_vtest,
        clips=clips_of(args.clip),
        frames=args.frames,
        detector=detector,
        encoding=args.encoding,
        footage=tuple(Path(f) for f in args.footage),
        footage_fps=args.footage_fps,
        jpeg_quality=args.jpeg_quality,
        through_codec=args.uniform_through_codec,
    )
    refusal = through_codec_refusal(opts.encoding) if opts.through_codec else None
    if refusal:
        say(refusal)
        return 2
    try:
        clips = run_cascade(out, opts)
    except ReferenceHolesError as holes:
        print(json.dumps({"command": args.command_line, **holes_doc(holes)}, indent=2))
        say(str(holes))
        return 2
    extra = {"detector": detector.describe()}
    rep = report.build(machine.describe(), {}, clips, extra, args.quick or args.no_vtest)
    doc = {
        "command": args.command_line,
        "machine": rep["machine"],
        "detector": rep["detector"],
        "encoding": args.encoding,
        **{k: v for k, v in rep.items() if k.startswith(("cascade.", "cascade_synthetic."))},
        "clips": rep["clips"],
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    missing = [k for k in rep["missing"] if k.startswith("cascade.")]
    return 1 if missing else 0
