"""What a demo source string means: a file, a live stream, or the built-in synthetic clip,
and the camera (with a readable, unique id) each becomes."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from strata.shared.synthetic import SyntheticClip
from strata.tools.demo.stack import Camera

_LIVE = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")

SYNTHETIC = "synthetic://"
# The built-in clip, paced at its frame rate like a camera (5 fps: what YOLOv8n at 640 keeps
# up with on two CPU cores once the gates have dropped the quiet frames).
SYNTHETIC_PARAMS = {"width": 640, "height": 480, "fps": 5, "objects": 4, "seed": 0}


def synthetic_source(frames: int) -> str:
    """The device agent's source string for the built-in clip."""
    query = "&".join(f"{k}={v}" for k, v in {**SYNTHETIC_PARAMS, "frames": frames}.items())
    return f"{SYNTHETIC}?{query}&realtime=1"


def synthetic_clip(source: str) -> SyntheticClip:
    """The clip a synthetic:// source string describes (the same frames the agent makes)."""
    args = {k: v[0] for k, v in parse_qs(urlsplit(source).query).items() if k != "realtime"}
    floats = {"noise"}
    kwargs = {k: float(v) if k in floats else int(v) for k, v in args.items()}
    return SyntheticClip(**kwargs)  # type: ignore[arg-type]


def is_file_source(source: str) -> bool:
    """Files are re-read for the annotated video; live streams are not."""
    return not source.startswith((*_LIVE, SYNTHETIC))


def cameras_for(sources: list[str]) -> list[Camera]:
    """One camera per source, with readable unique ids; FileNotFoundError for a missing file."""
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


def camera_id(index: int, source: str) -> str:
    """A readable, unique camera id for a source."""
    stem = Path(source.split("?", maxsplit=1)[0].rstrip("/")).stem or "stream"
    return f"cam{index}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:32]
