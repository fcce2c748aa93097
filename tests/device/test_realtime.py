"""device.source.realtime: a file paced at its frame rate, like a camera."""

from __future__ import annotations

import time
from pathlib import Path

from strata.device.capture.sources import open_source
from strata.shared.config.device import SourceConfig
from strata.shared.synthetic import SyntheticClip


def test_a_file_is_paced_only_when_realtime(tmp_path: Path) -> None:
    clip = SyntheticClip(width=160, height=120, frames=11, fps=20, seed=1)
    path = clip.write(tmp_path / "c.mp4")

    def read(realtime: bool) -> tuple[float, list[float]]:
        src = open_source(str(path), SourceConfig(realtime=realtime))
        t0 = time.monotonic()
        stamps = []
        for _f in src.frames():
            stamps.append(time.monotonic() - t0)
        src.close()
        return time.monotonic() - t0, stamps

    fast, _ = read(False)
    paced, stamps = read(True)
    assert len(stamps) == 11
    # 11 frames at 20 fps: the last leaves 0.5 s after the first, never earlier.
    assert stamps[-1] - stamps[0] >= 0.49
    assert paced >= 0.49 and fast < paced
