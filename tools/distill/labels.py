"""Label a clip with the chosen teachers, fused and tracked; save/load the result."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np
from strata.tools.distill.boxes import Detections
from strata.tools.distill.teachers import HogTeacher, ModelTeacher, MotionTeacher, Teacher
from strata.tools.distill.tracking import FusionSettings, TrackStats, fuse_frame, track_labels

TEACHERS = ("hog", "motion", "model")


class ClipError(ValueError):
    """A clip cannot be opened or has too few frames."""


def read_frames(path: Path) -> Iterator[np.ndarray]:
    """BGR frames of a video file, in order."""
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ClipError(f"cannot open clip {path}")
    try:
        while True:
            ok, frame = cap.read()
            if not ok:
                return
            yield frame
    finally:
        cap.release()


def holdout_start(frames: int, holdout: float) -> int:
    """First held-out frame index: the last `holdout` share of a clip is never trained on."""
    return max(1, min(frames - 1, round(frames * (1.0 - holdout))))


@dataclass(frozen=True, slots=True)
class TeacherStats:
    """What each teacher and the fusion produced, for the model card."""

    frames: int
    hog_boxes_per_frame: float
    motion_blobs_per_frame: float
    model_boxes_per_frame: float
    label_boxes_per_frame: float
    hog_ms_per_frame: float
    tracks: TrackStats


@dataclass(frozen=True, slots=True)
class ClipLabels:
    """Teacher labels of every frame of one clip."""

    clip: Path
    width: int
    height: int
    fps: float
    boxes: list[Detections]
    holdout_start: int
    teachers: tuple[str, ...]
    stats: TeacherStats
    background: np.ndarray  # the empty scene from the motion teacher (or the first frame)

    @property
    def frames(self) -> int:
        return len(self.boxes)

    def save(self, directory: Path) -> Path:
        """Write labels.npz (boxes) and labels.json (the rest) under `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        counts = np.asarray([len(b) for b in self.boxes], np.int64)
        np.savez_compressed(
            directory / "labels.npz",
            counts=counts,
            xyxy=np.concatenate([b.xyxy for b in self.boxes]),
            sources=np.concatenate([b.sources for b in self.boxes]),
        )
        cv2.imwrite(str(directory / "background.png"), self.background)
        meta = {
            "clip": str(self.clip.resolve()),
            "width": self.width,
            "height": self.height,
            "fps": self.fps,
            "holdout_start": self.holdout_start,
            "teachers": list(self.teachers),
            "stats": asdict(self.stats),
        }
        path = directory / "labels.json"
        path.write_text(json.dumps(meta, indent=2))
        return path

    @staticmethod
    def load(directory: Path) -> ClipLabels:
        meta = json.loads((directory / "labels.json").read_text())
        arrays = np.load(directory / "labels.npz")
        splits = np.cumsum(arrays["counts"])[:-1]
        boxes = [
            Detections(x.astype(np.float32), np.ones(len(x), np.float32), s)
            for x, s in zip(
                np.split(arrays["xyxy"], splits), np.split(arrays["sources"], splits), strict=True
            )
        ]
        st = meta["stats"]
        stats = TeacherStats(**{**st, "tracks": TrackStats(**st["tracks"])})
        return ClipLabels(
            Path(meta["clip"]),
            meta["width"],
            meta["height"],
            meta["fps"],
            boxes,
            meta["holdout_start"],
            tuple(meta["teachers"]),
            stats,
            _read_image(directory / "background.png"),
        )


def _read_image(path: Path) -> np.ndarray:
    image = cv2.imread(str(path))
    if image is None:
        raise ClipError(f"cannot read {path}")
    out: np.ndarray = image
    return out


def make_teachers(names: Sequence[str], model_path: Path | None) -> list[Teacher]:
    """Teacher objects for names from TEACHERS."""
    out: list[Teacher] = []
    for name in names:
        if name == "hog":
            out.append(HogTeacher())
        elif name == "motion":
            out.append(MotionTeacher())
        elif name == "model":
            if model_path is None:
                raise ValueError("the model teacher needs --teacher-model")
            out.append(ModelTeacher(model_path))
        else:
            raise ValueError(f"unknown teacher {name!r}; known: {', '.join(TEACHERS)}")
    if not out:
        raise ValueError("at least one teacher is needed")
    return out


def _candidates(
    frames: Iterable[np.ndarray], teachers: list[Teacher], fusion: FusionSettings
) -> tuple[list[Detections], tuple[int, int, int, float]]:
    """Per frame, the teachers' boxes fused; and (HOG boxes, motion blobs, model boxes,
    HOG seconds) over the clip."""
    candidates: list[Detections] = []
    hog_n = motion_n = model_n = 0
    hog_s = 0.0
    for frame in frames:
        detector_parts: list[Detections] = []
        blobs = Detections.empty()
        for t in teachers:
            t0 = time.perf_counter()
            d = t.detect(frame)
            if isinstance(t, HogTeacher):
                hog_s += time.perf_counter() - t0
                hog_n += len(d)
                detector_parts.append(d)
            elif isinstance(t, MotionTeacher):
                motion_n += len(d)
                blobs = d
            else:
                model_n += len(d)
                detector_parts.append(d)
        if detector_parts:
            candidates.append(fuse_frame(Detections.concat(detector_parts), blobs, fusion))
        else:
            candidates.append(blobs)
    return candidates, (hog_n, motion_n, model_n, hog_s)


def label_clip(
    clip: Path,
    teacher_names: Sequence[str] = ("hog", "motion"),
    model_path: Path | None = None,
    fusion: FusionSettings | None = None,
    holdout: float = 0.2,
    progress: bool = True,
) -> ClipLabels:
    """Run the teachers over a clip (two passes), fuse and track their boxes."""
    from tqdm import tqdm

    fusion = fusion or FusionSettings()
    teachers = make_teachers(teacher_names, model_path)
    cap = cv2.VideoCapture(str(clip))
    fps = float(cap.get(cv2.CAP_PROP_FPS) or 10.0)
    cap.release()
    motion = [t for t in teachers if isinstance(t, MotionTeacher)]
    n = 0
    first: np.ndarray | None = None
    for frame in read_frames(clip):
        if first is None:
            first = frame.copy()
        for m in motion:
            m.warm_up(frame)
        n += 1
    if first is None or n < 2:
        raise ClipError(f"clip {clip} has {n} frames; at least 2 are needed")
    height, width = first.shape[:2]
    frames = tqdm(read_frames(clip), total=n, desc=f"teachers {clip.name}", disable=not progress)
    candidates, counts = _candidates(frames, teachers, fusion)
    hog_n, motion_n, model_n, hog_s = counts
    n = len(candidates)
    if not any(isinstance(t, HogTeacher | ModelTeacher) for t in teachers):
        # Motion alone: every blob is a detector-less candidate, confirmed by track length
        # only, whatever its shape (the upright-person test is for the people teachers).
        fusion = FusionSettings(
            **{**asdict(fusion), "min_detector_hits": 10**9, "motion_min_aspect": 0.0}
        )
    boxes, tstats = track_labels(candidates, fusion)
    stats = TeacherStats(
        frames=n,
        hog_boxes_per_frame=hog_n / n,
        motion_blobs_per_frame=motion_n / n,
        model_boxes_per_frame=model_n / n,
        label_boxes_per_frame=sum(len(b) for b in boxes) / n,
        hog_ms_per_frame=1000.0 * hog_s / n if hog_n or "hog" in teacher_names else 0.0,
        tracks=tstats,
    )
    background = motion[0].background() if motion else first
    return ClipLabels(
        clip,
        width,
        height,
        fps,
        boxes,
        holdout_start(n, holdout),
        tuple(teacher_names),
        stats,
        background,
    )
