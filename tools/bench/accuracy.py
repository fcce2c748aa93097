"""The cascade's accuracy and bytes on the bench's clips: `strata bench cascade`.

The synthetic clip first (its ground truth is known), then vtest when present (or the clips
`--clip` makes from it: quiet footage, pans and cuts; tools/cascade_clips.py): each through
a reference run (the detector on every frame) and a cascade run of the real daemons over
loopback (tools/bench/cascade.py), compared frame by frame. Writes the cascade.* keys of
`strata bench`'s report, per clip, as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from strata.shared import machine
from strata.shared.synthetic import SyntheticClip
from strata.tools import cascade_clips
from strata.tools.bench import report
from strata.tools.bench.cascade import (
    ClipResult,
    Labels,
    ReferenceHolesError,
    measure_clip,
    synthetic_truth,
)
from strata.tools.bench.progress import say
from strata.tools.clips import find_vtest


def run_cascade(
    work: Path,
    quick: bool,
    vtest: Path | None,
    skip_vtest: bool,
    clips_from_vtest: tuple[str, ...] = ("vtest",),
) -> list[ClipResult]:
    """The synthetic clip (with ground truth), then the clips made from vtest (`vtest`
    itself, `quiet`, `pans`: tools/cascade_clips.py) when it is present and not quick."""
    clips: list[ClipResult] = []
    frames = 30 if quick else 300
    clip = SyntheticClip(width=640, height=480, frames=frames, fps=10, objects=4, seed=0)
    path = clip.write(work / "synthetic.mp4")
    labels = Labels()
    say(f"cascade on the synthetic clip ({frames} frames): reference run, then cascade run ...")
    clips.append(measure_clip(path, work / "synthetic", synthetic_truth(clip, labels), labels))
    if skip_vtest:
        return clips
    if vtest is None or not vtest.is_file():
        say("vtest.mp4 not found (python .ci/test_data.py fetches it); cascade on it skipped")
    elif quick:
        say("--quick: cascade on vtest.mp4 skipped (795 frames through two full pipeline runs)")
    else:
        for name in clips_from_vtest:
            path = vtest if name == "vtest" else cascade_clips.make(name, vtest, work / "clips")
            say(f"cascade on {path.name}: reference run, then cascade run ...")
            clips.append(measure_clip(path, work / name, curve=True))
    return clips


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
    p.add_argument("--no-vtest", action="store_true", help="the synthetic clip only")
    p.add_argument(
        "--clip",
        action="append",
        choices=("vtest", *cascade_clips.RECIPES),
        help="a clip from vtest after the synthetic one (repeatable; default vtest): quiet "
        "(passages between empty street), pans (a camera that pans and cuts)",
    )
    p.add_argument("--json", metavar="OUT", help="write the figures here too")


def run(args: argparse.Namespace) -> int:
    """Both clips' figures as JSON on stdout; 0 when the headline clip has every key, 2
    (and the frames without an answer, by drop reason, instead of figures) when a
    reference run left holes."""
    out = Path(args.out)
    try:
        chosen = tuple(args.clip or ("vtest",))
        clips = run_cascade(out, args.quick, find_vtest(args.vtest), args.no_vtest, chosen)
    except ReferenceHolesError as holes:
        print(json.dumps({"command": args.command_line, **holes_doc(holes)}, indent=2))
        say(str(holes))
        return 2
    rep = report.build(machine.describe(), {}, clips, {}, args.quick or args.no_vtest)
    doc = {
        "command": args.command_line,
        "machine": rep["machine"],
        **{k: v for k, v in rep.items() if k.startswith(("cascade.", "cascade_synthetic."))},
        "clips": rep["clips"],
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    missing = [k for k in rep["missing"] if k.startswith("cascade.")]
    return 1 if missing else 0
