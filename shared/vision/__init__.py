"""Image helpers the tiers share: letterboxing, YOLO output decoding, boxes and IoU."""

from .boxes import FrameBoxes, greedy_pairs, iou, match_count
from .letterbox import Letterbox, LetterboxWriter, plan_letterbox
from .yolo import COCO80, decode_yolo

__all__ = [
    "COCO80",
    "FrameBoxes",
    "Letterbox",
    "LetterboxWriter",
    "decode_yolo",
    "greedy_pairs",
    "iou",
    "match_count",
    "plan_letterbox",
]
