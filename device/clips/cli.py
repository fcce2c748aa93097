"""`strata device-clips`: the clips kept on this device, listed and served on request.

For sites that pay per byte and keep clips on the device (`device.clips.upload.target`
empty): the clips folder is the store, and this reads it without changing it (the sidecars
are written atomically, so it is safe beside a running agent). A clip the agent is still
cutting is listed as open; copied out, it plays up to its last fragment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.shared.cli.common import add_config_flag, load_or_exit
from strata.shared.contracts import clips_pb2

_OUTCOMES = {
    0: "open",
    1: "complete",
    2: "disconnected",
    3: "no keyframe",
    4: "codec",
    5: "error",
    6: "cut short",
    7: "ended",
}


@dataclass(frozen=True, slots=True)
class KeptClip:
    """One clip in the folder, as its sidecar tells it (or its file alone, when the agent
    stopped before writing the first sidecar)."""

    path: Path
    clip_id: str
    camera_id: str
    track_uids: tuple[str, ...]
    start_ns: int
    end_ns: int
    state: str
    reason: str
    size: int

    def matches(self, ref: str) -> bool:
        """`ref` names this clip: its id, one of its tracks, or camera/track."""
        return (
            ref == self.clip_id
            or ref in self.track_uids
            or any(ref == f"{self.camera_id}/{t}" for t in self.track_uids)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "clip_id": self.clip_id,
            "camera_id": self.camera_id,
            "track_uids": list(self.track_uids),
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "state": self.state,
            "reason": self.reason,
            "bytes": self.size,
            "path": str(self.path),
        }


def kept_clips(folder: Path) -> list[KeptClip]:
    """Every clip of the folder, oldest first."""
    from .spool import SIDECAR, read_sidecar

    paths = {p.with_suffix(".mp4") for p in folder.glob(f"*/*{SIDECAR}")}
    paths |= set(folder.glob("*/*.mp4"))
    out = [_kept(path, read_sidecar(path)) for path in sorted(paths)]
    return sorted(out, key=lambda c: (c.start_ns, c.clip_id))


def _kept(path: Path, info: clips_pb2.ClipInfo | None) -> KeptClip:
    size = path.stat().st_size if path.exists() else 0
    if info is None:
        camera = urllib.parse.unquote(path.parent.name)
        session, _, n = path.stem.rpartition("-")
        info = clips_pb2.ClipInfo(clip_id=f"{camera}/{session}/{n}", camera_id=camera)
    state = _OUTCOMES.get(int(info.outcome), "unknown") if info.final else "open"
    return KeptClip(
        path=path,
        clip_id=info.clip_id,
        camera_id=info.camera_id,
        track_uids=tuple(info.track_uids),
        start_ns=info.start_ns,
        end_ns=info.end_ns,
        state=state,
        reason=info.reason,
        size=size,
    )


def register(subparsers: Any) -> None:
    """Add the `device-clips` subcommand."""
    p = subparsers.add_parser(
        "device-clips",
        help="list the clips kept on this device, or copy one out",
        description="The clips in the device's clips folder (device.clips.dir). With REF "
        "(a clip id, a track uid, or CAMERA/TRACK_UID) and -o, copy that clip out.",
    )
    p.add_argument("ref", nargs="?", metavar="REF", help="the clip to copy out")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write the clip (MP4)")
    p.add_argument("--dir", metavar="DIR", help="the clips folder (default: device.clips.dir)")
    p.add_argument("--json", action="store_true", help="one JSON object per clip")
    add_config_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List the folder's clips, or write the one REF names; 1 when it is not there."""
    folder = Path(args.dir) if args.dir else Path(load_or_exit(args, {}, "device").device.clips.dir)
    if not folder.is_dir():
        print(f"strata device-clips: no clips folder at {folder}", file=sys.stderr)
        return 1
    clips = kept_clips(folder)
    if args.ref is None:
        for c in clips:
            print(json.dumps(c.as_dict()) if args.json else _line(c))
        return 0
    found = [c for c in clips if c.matches(args.ref) and c.size > 0]
    if not found:
        print(
            f"strata device-clips: no clip with bytes for {args.ref!r} in {folder}", file=sys.stderr
        )
        return 1
    if not args.output:
        print("strata device-clips: give -o FILE to write the clip", file=sys.stderr)
        return 2
    clip = found[-1]  # the newest: a track that spans a restart has its latest part last
    tmp = Path(args.output + ".part")
    shutil.copyfile(clip.path, tmp)
    os.replace(tmp, args.output)
    print(f"{args.output}: {clip.clip_id} ({clip.state}, {clip.size} bytes)")
    return 0


def _line(c: KeptClip) -> str:
    seconds = (c.end_ns - c.start_ns) / 1e9 if c.end_ns > c.start_ns else 0.0
    why = f" ({c.reason})" if c.reason else ""
    tracks = ",".join(c.track_uids) or "-"
    return f"{c.clip_id}  {c.state}{why}  {seconds:.1f} s  {c.size} bytes  tracks {tracks}"
