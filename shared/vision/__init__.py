"""Image helpers the tiers share: detector preprocessing, output layouts, boxes and IoU."""

from .boxes import FrameBoxes, greedy_pairs, iou, match_count
from .layouts import DetectLayout, LayoutError, Thresholds, decode_detections
from .letterbox import Letterbox, LetterboxWriter, Preprocess, plan_letterbox
from .yolo import COCO80, decode_yolo

__all__ = [
    "COCO80",
    "DetectLayout",
    "FrameBoxes",
    "LayoutError",
    "Letterbox",
    "LetterboxWriter",
    "Preprocess",
    "Thresholds",
    "decode_detections",
    "decode_yolo",
    "greedy_pairs",
    "iou",
    "match_count",
    "plan_letterbox",
]
