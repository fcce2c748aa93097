"""The annotated MP4: source frames with the edge's boxes and the cloud's verdicts drawn on."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from strata.cloud.classify.verdicts import event_verdict
from strata.shared.contracts import analytics_pb2, common_pb2
from strata.tools.demo.results import Received

log = logging.getLogger(__name__)

_FRESH = (0, 220, 255)  # boxes of a frame the edge saw (BGR)
_HELD = (160, 160, 160)  # a dropped frame: the last kept frame's boxes, greyed
_CLOUD = (255, 160, 0)


def _colour(class_id: int) -> tuple[int, int, int]:
    rng = np.random.default_rng(class_id + 7)
    c = rng.integers(64, 256, size=3)
    return int(c[0]), int(c[1]), int(c[2])


def _draw_box(
    img: np.ndarray,
    box: common_pb2.Box,
    text: str,
    colour: tuple[int, int, int],
    thickness: int = 2,
    below: bool = False,
) -> None:
    import cv2

    h, w = img.shape[:2]
    x1, y1 = int(np.clip(box.x1, 0, w - 1)), int(np.clip(box.y1, 0, h - 1))
    x2, y2 = int(np.clip(box.x2, 0, w - 1)), int(np.clip(box.y2, 0, h - 1))
    cv2.rectangle(img, (x1, y1), (x2, y2), colour, thickness)
    if text:
        y = min(y2 + 14, h - 2) if below else max(y1 - 4, 12)
        cv2.putText(img, text, (x1 + 2, y), cv2.FONT_HERSHEY_SIMPLEX, 0.45, colour, 1, cv2.LINE_AA)


def draw_frame(
    img: np.ndarray,
    camera: str,
    index: int,
    result: Received | None,
    fresh: bool,
    events: Sequence[analytics_pb2.Event],
) -> None:
    """Draw one frame's boxes, its cloud verdicts and a status line onto `img` in place."""
    import cv2

    n = 0
    if result is not None:
        colour = _FRESH if fresh else _HELD
        # Drawing is per box by nature; this runs in the demo's report, not on a hot path.
        for det in result.message.detections:
            label = det.label or f"class {det.class_id}"
            _draw_box(
                img, det.box, f"{label} {det.score:.2f}", _colour(det.class_id) if fresh else colour
            )
            n += 1
        if fresh:
            for ev in events:
                # The verdict on the detector's label, the classifier's label as its evidence.
                verdict = event_verdict(ev)
                text = verdict.text if verdict else f"cloud: {ev.label} {ev.score:.2f}"
                _draw_box(img, ev.edge_detection.box, text, _CLOUD, 1, True)
    state = "edge result" if fresh else "no edge result: the last result's boxes, grey"
    status = f"{camera}  frame {index}  {state}  boxes {n}"
    cv2.rectangle(img, (0, 0), (img.shape[1], 18), (0, 0, 0), -1)
    cv2.putText(
        img, status, (4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (255, 255, 255), 1, cv2.LINE_AA
    )


def annotate_frames(
    frames: Iterable[np.ndarray],
    fps: float,
    camera: str,
    results: Mapping[tuple[str, int], Received],
    events: Sequence[analytics_pb2.Event],
    out_path: Path,
    max_frames: int | None = None,
) -> int:
    """Draw each frame's results (by frame index) and encode H.264; returns frames written."""
    import av

    by_sequence: dict[int, list[analytics_pb2.Event]] = {}
    for ev in events:
        if ev.camera_id == camera:
            by_sequence.setdefault(ev.sequence, []).append(ev)
    written = 0
    last: Received | None = None
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(out_path), "w") as out:
        vout: Any = None
        for index, frame in enumerate(frames):
            if max_frames is not None and index >= max_frames:
                break
            if vout is None:
                vout = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
                vout.width = frame.shape[1] - frame.shape[1] % 2
                vout.height = frame.shape[0] - frame.shape[0] % 2
                vout.pix_fmt = "yuv420p"
                vout.options = {"crf": "23", "preset": "veryfast"}
            img = np.ascontiguousarray(frame[: vout.height, : vout.width])
            got = results.get((camera, index))
            if got is not None:
                last = got
            seq_events = by_sequence.get(got.message.sequence, []) if got is not None else []
            draw_frame(
                img, camera, index, got if got is not None else last, got is not None, seq_events
            )
            for packet in vout.encode(av.VideoFrame.from_ndarray(img, format="bgr24")):
                out.mux(packet)
            written += 1
        if vout is not None:
            for packet in vout.encode():
                out.mux(packet)
    return written


def decoded_frames(source: Path) -> tuple[Iterator[np.ndarray], float]:
    """BGR frames of a video file (copies: they are drawn on) and its frame rate."""
    import av

    container = av.open(str(source))
    stream = container.streams.video[0]
    fps = float(stream.average_rate or 10)

    def frames() -> Iterator[np.ndarray]:
        with container:
            for frame in container.decode(stream):
                yield frame.to_ndarray(format="bgr24")

    return frames(), fps


def annotate_video(
    source: Path,
    camera: str,
    results: Mapping[tuple[str, int], Received],
    events: Sequence[analytics_pb2.Event],
    out_path: Path,
    max_frames: int | None = None,
) -> int:
    """Decode `source` and annotate it (see annotate_frames)."""
    frames, fps = decoded_frames(source)
    return annotate_frames(frames, fps, camera, results, events, out_path, max_frames)
