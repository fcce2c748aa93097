"""How many of a calibration burst's first frames go as codec probes (raw pixels, so the
edge measures what the JPEG costs its detector: docs/edge.md, "What the payload codec
costs")."""

from __future__ import annotations

from strata.shared.config.device import CascadeConfig
from strata.shared.contracts import CODEC_MIN_BOXES

# Bursts a camera may send whole as probes while the edge's sample is short: a scene with
# nothing in it (an empty street at night) adds no box, and would otherwise send every
# burst frame raw for as long as it stays empty (about 8x a JPEG's bytes each).
WHOLE_BURSTS = 3


def codec_probes(cfg: CascadeConfig, codec_boxes: int, whole_bursts: int = 0) -> int:
    """All of the burst's frames while the edge's sample of the codec holds under
    CODEC_MIN_BOXES boxes (`codec_boxes`, its last word; 0 before any) and the camera has
    sent fewer than WHOLE_BURSTS bursts whole (`whole_bursts`), else `cfg.codec_probes`;
    none when that is 0."""
    if cfg.codec_probes == 0:
        return 0
    if codec_boxes < CODEC_MIN_BOXES and whole_bursts < WHOLE_BURSTS:
        return max(cfg.burst_frames, cfg.codec_probes)
    return cfg.codec_probes
