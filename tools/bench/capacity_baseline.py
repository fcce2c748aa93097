"""The pipeline a user would otherwise write: the same detector on every frame, with
supervision's ByteTrack and LineZone. How many 10 fps cameras one node carries that way.

    python -m strata.tools.bench.capacity_baseline --clip data/vtest.mp4 [--frames 300]

One process, one loop, as the supervision examples go: decode a frame (PyAV), run the
detector (the edge's own: the same model file, letterbox and output decoding as
`strata models compare`, ONNX Runtime's default threads: every core), update ByteTrack,
trigger a LineZone across the middle of the picture. Every frame is detected, so its
accuracy against the detector on every frame is 1 by construction: what it is compared on
is the frames per second it sustains, and the cameras that makes at the clip's frame rate
(floor(fps / clip fps); the loop serves cameras round robin, so a frame waits at most one
round: N frames' time, under 1 s at that N).

supervision is not a dependency of strata: it pulls opencv-python, which fights the
opencv-python-headless strata installs (both write the cv2 package). Install it beside,
without its dependencies (docs/benchmarks.md says how); this module imports it only when it
runs and says so when it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# The version whose API this baseline calls (sv.ByteTrack; 0.27 on moved trackers out).
SUPERVISION = "supervision==0.26.1"
INSTALL = (
    f"pip install --no-deps {SUPERVISION} 'pydeprecate<0.14,>=0.9' requests defusedxml "
    "(in an environment beside strata's: without --no-deps it pulls opencv-python)"
)


class MissingSupervisionError(RuntimeError):
    """supervision is not installed where the baseline runs."""


def import_supervision() -> Any:
    """The supervision module, or an error naming the install command."""
    try:
        import supervision as sv
    except ImportError as exc:
        raise MissingSupervisionError(
            f"the baseline needs supervision ({exc}); install it: {INSTALL}"
        ) from None
    if not hasattr(sv, "ByteTrack"):
        raise MissingSupervisionError(
            f"supervision {sv.__version__} has no ByteTrack; install {SUPERVISION}: {INSTALL}"
        )
    return sv


def _frames(clip: Path, limit: int) -> Any:
    import av

    with av.open(str(clip)) as f:
        for i, frame in enumerate(f.decode(video=0)):
            if limit and i >= limit:
                return
            yield frame.to_ndarray(format="bgr24")


def measure(
    clip: Path,
    frames: int,
    repository: str,
    model: str,
    backend: str = "onnxruntime-cpu",
    variant: str | None = None,
) -> dict[str, Any]:
    """Frames per second of decode + detector + ByteTrack + LineZone over `clip`."""
    sv = import_supervision()
    from strata.shared.config.edge import DetectionConfig
    from strata.shared.models import ModelRepository
    from strata.shared.models.detector import detector_spec
    from strata.shared.vision import Thresholds
    from strata.tools.bench.cascade import clip_fps
    from strata.tools.models.compare import _Detector

    repo = ModelRepository(repository or None)
    spec = detector_spec(repo.manifest(model))
    det_cfg = DetectionConfig()
    th = Thresholds(det_cfg.score_threshold, det_cfg.iou_threshold, det_cfg.max_detections)
    det = _Detector(repo.open(model, backend=backend, variant=variant), spec, th, 0)
    fps = clip_fps(clip) or 10.0
    tracker = sv.ByteTrack(frame_rate=round(fps))
    line: Any = None
    stages = {"decode": 0.0, "detect": 0.0, "track_line": 0.0}
    n = crossed = 0
    cpu0, t_all = time.process_time(), time.perf_counter()
    source = _frames(clip, frames)
    while True:
        t = time.perf_counter()
        image = next(source, None)
        if image is None:
            break
        t1 = time.perf_counter()
        boxes = det.detect(image)
        t2 = time.perf_counter()
        if line is None:
            h, w = image.shape[:2]
            line = sv.LineZone(start=sv.Point(0, h // 2), end=sv.Point(w, h // 2))
        d = sv.Detections(
            xyxy=np.asarray(boxes.boxes, np.float32).reshape(-1, 4),
            confidence=np.asarray(boxes.scores, np.float32),
            class_id=np.asarray(boxes.class_ids, np.int64),
        )
        tracked = tracker.update_with_detections(d)
        cin, cout = line.trigger(tracked)
        crossed += int(np.sum(cin)) + int(np.sum(cout))
        t3 = time.perf_counter()
        stages["decode"] += t1 - t
        stages["detect"] += t2 - t1
        stages["track_line"] += t3 - t2
        n += 1
    wall = time.perf_counter() - t_all
    cpu = time.process_time() - cpu0
    det.close()
    rate = n / wall if wall > 0 else 0.0
    no_decode = n / (stages["detect"] + stages["track_line"]) if n else 0.0
    return {
        "supervision": sv.__version__,
        "backend": backend,
        "variant": variant or "",
        "clip": clip.name,
        "frames": n,
        "clip_fps": fps,
        "fps": rate,
        "cpu_s_per_frame": cpu / n if n else 0.0,
        "ms_per_frame": {k: v / n * 1e3 for k, v in stages.items()} if n else {},
        "cameras": int(rate // fps),
        # The cameras it would carry if decoding ran elsewhere (as strata's devices do).
        "cameras_without_decode": int(no_decode // fps),
        "line_crossings": crossed,
        "load_avg_1m": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clip", type=Path, required=True)
    p.add_argument("--frames", type=int, default=0)
    p.add_argument("--model-repository", default="")
    p.add_argument("--model", default="picodet_s_416")
    p.add_argument("--backend", default="onnxruntime-cpu")
    p.add_argument("--variant", default=None, help="the model's variant (e.g. int8)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    try:
        out = measure(a.clip, a.frames, a.model_repository, a.model, a.backend, a.variant)
    except MissingSupervisionError as exc:
        print(f"capacity baseline: {exc}", file=sys.stderr)
        return 3
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
