"""ultralytics' own predict loop over the same clip and ONNX model, at the same batch.

strata's reference run batches up to `edge.batching.max_batch` frames; ultralytics is run at
that batch (the ratio) and at batch 1 (beside it), so neither side is credited with
batching the other did not do.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

# Run in the interpreter that has ultralytics (the export extra), which need not have strata.
_SCRIPT = """
import json, sys, time
try:
    from ultralytics import YOLO
except ImportError:
    sys.exit(3)
clip, model, imgsz = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = []
for batch in (int(b) for b in sys.argv[4].split(",")):
    yolo = YOLO(model, task="detect")
    kw = dict(stream=True, imgsz=imgsz, device="cpu", verbose=False, rect=False, batch=batch)
    for _ in yolo.predict(clip, **kw):
        break  # warm-up: session creation and the first inference
    n, t = 0, time.perf_counter()
    for _ in yolo.predict(clip, **kw):
        n += 1
    out.append({"batch": batch, "frames": n, "seconds": time.perf_counter() - t})
print(json.dumps(out))
"""
# rect=False: the ONNX model's batch axis is dynamic, which makes ultralytics letterbox to a
# rectangle; the spatial axes are fixed, so it must pad to the square like strata does.


def strata_batch(overrides: dict[str, Any]) -> int:
    """The edge's max batch in a run with these config overrides."""
    from strata.shared.config.edge import BatchingConfig

    batching = overrides.get("edge", {}).get("batching", {})
    return int(batching.get("max_batch", BatchingConfig().max_batch))


def ultralytics_side_by_side(
    clip: Path,
    strata_fps: float | None,
    python: str,
    batch: int,
    timeout_s: float = 600.0,
) -> dict[str, Any] | None:
    """ultralytics' `YOLO(model).predict(stream=True)` at `batch` and at 1, against strata.

    None when `python` has no ultralytics (the export extra is not installed there).
    """
    from strata.shared.models import ModelRepository

    manifest, _variant, onnx_path = ModelRepository().file_of("yolov8n")
    imgsz = int(manifest.input.shape[-1] or 640)
    batches = sorted({batch, 1}, reverse=True)
    with tempfile.TemporaryDirectory() as cfg_dir:
        env = {**os.environ, "YOLO_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "YOLO_CONFIG_DIR": cfg_dir}
        proc = subprocess.run(
            [
                python,
                "-c",
                _SCRIPT,
                str(clip),
                str(onnx_path),
                str(imgsz),
                ",".join(map(str, batches)),
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    if proc.returncode == 3:
        return None
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    fps = {int(r["batch"]): r["frames"] / r["seconds"] if r["seconds"] > 0 else 0.0 for r in runs}
    same = fps.get(batch, 0.0)
    return {
        "python": python,
        "model": Path(onnx_path).name,
        "clip": clip.name,
        "imgsz": imgsz,
        "frames": int(runs[0]["frames"]),
        "batch": batch,
        "ultralytics_fps": round(same, 2),
        "ultralytics_fps_batch1": round(fps.get(1, 0.0), 2),
        "strata_pipeline_fps": round(strata_fps, 2) if strata_fps else None,
        "ratio": round(strata_fps / same, 3) if strata_fps and same else None,
        "ratio_vs_batch1": round(strata_fps / fps[1], 3) if strata_fps and fps.get(1) else None,
        "what": f"ultralytics' predict loop (decode, letterbox, ONNX Runtime, NMS) in one "
        f"process at batch {batch} (the ratio) and 1, against strata's reference run (device "
        f"decode, ZeroMQ, edge batching up to {batch}, YOLO, NMS, PUB), both over every frame "
        "of the same clip with the same ONNX model",
    }
