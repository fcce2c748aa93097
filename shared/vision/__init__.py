"""Image helpers the tiers share: letterboxing and YOLO output decoding."""

from .letterbox import Letterbox, LetterboxWriter, plan_letterbox
from .yolo import COCO80, FrameBoxes, decode_yolo

__all__ = ["COCO80", "FrameBoxes", "Letterbox", "LetterboxWriter", "decode_yolo", "plan_letterbox"]
