"""The cascade bench's clip and detector options, shared by `strata bench` and
`strata bench cascade` (light: `strata --help` imports it without any benchmark)."""

from __future__ import annotations

import argparse

from strata.shared.config.edge import DEFAULT_DETECTOR

# The clips made from vtest, in order: vtest itself, then tools/cascade_clips.py's recipes
# (the quiet footage, pans and cuts).
CLIPS: tuple[str, ...] = ("vtest", "quiet", "pans")

# What the cascade run's device sends the edge: the device's default (JPEG) unless told;
# bgr sends raw pixels, as the reference run does, so a run with it has no codec's cost.
ENCODINGS: tuple[str, ...] = ("jpeg", "h264", "bgr")


def add_clip_arguments(p: argparse.ArgumentParser) -> None:
    """--clip, --frames, --model-repository, --model, --encoding."""
    p.add_argument(
        "--clip",
        action="append",
        choices=("all", *CLIPS),
        help="a clip from vtest after the synthetic one (repeatable; default all): vtest, "
        "quiet (passages between empty street), pans (a camera that pans and cuts)",
    )
    p.add_argument(
        "--frames",
        type=int,
        default=0,
        metavar="N",
        help="only the first N frames of every clip (a quick check, not a figure)",
    )
    p.add_argument(
        "--model-repository",
        default="",
        metavar="DIR",
        help="model repository of the edge's detector (default: the starter repository)",
    )
    p.add_argument(
        "--model",
        default=DEFAULT_DETECTOR,
        metavar="NAME",
        help=f"the detector's name in that repository (default {DEFAULT_DETECTOR})",
    )
    add_encoding_argument(p)


def add_encoding_argument(p: argparse.ArgumentParser) -> None:
    """--encoding: the cascade run's payloads to the edge."""
    p.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default="jpeg",
        help="what the cascade run's device sends the edge (default jpeg, the device's "
        "default; h264 spends fewer bytes, and its still pictures can hold a detection near "
        "the score threshold on every frame: docs/benchmarks.md, Cascade); bgr, raw pixels "
        "as the reference gets them, leaves the codec's cost out",
    )


def clips_of(chosen: list[str] | None) -> tuple[str, ...]:
    """--clip's values in bench order (none or "all": every clip)."""
    if not chosen or "all" in chosen:
        return CLIPS
    return tuple(c for c in CLIPS if c in chosen)
