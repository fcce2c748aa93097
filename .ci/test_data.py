"""Fetch the real test clip: OpenCV's vtest.avi from Debian's opencv-doc, plus an H.264 copy.

Writes data/vtest.avi and data/vtest.mp4 (GOP 10). Idempotent; without apt it says so and
the tests that need the clip skip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
MEMBER = "usr/share/doc/opencv-doc/examples/data/vtest.avi"


def fetch_avi() -> bool:
    """Download opencv-doc with apt and unpack vtest.avi into data/."""
    if (DATA / "vtest.avi").exists():
        return True
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        print("test_data: no apt-get here; tests on vtest.avi will be skipped", file=sys.stderr)
        return False
    DATA.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        ok = subprocess.run(
            ["apt-get", "download", "opencv-doc"], cwd=tmp, capture_output=True, text=True
        )
        debs = list(Path(tmp).glob("opencv-doc_*.deb"))
        if ok.returncode != 0 or not debs:
            print(
                f"test_data: apt-get download opencv-doc failed: {ok.stderr.strip()}",
                file=sys.stderr,
            )
            return False
        subprocess.run(["dpkg", "-x", str(debs[0]), tmp], check=True)
        shutil.copy(Path(tmp) / MEMBER, DATA / "vtest.avi")
    return True


def transcode_h264(src: Path, dst: Path, gop: int = 10) -> None:
    """H.264 copy with PyAV (no ffmpeg binary needed)."""
    import av

    with av.open(str(src)) as inp, av.open(str(dst) + ".part", "w", format="mp4") as out:
        vin = inp.streams.video[0]
        rate = vin.average_rate or 10
        vout = out.add_stream("libx264", rate=rate)
        vout.width, vout.height = vin.codec_context.width, vin.codec_context.height
        vout.pix_fmt = "yuv420p"
        vout.options = {"g": str(gop), "crf": "20", "preset": "veryfast"}
        for frame in inp.decode(vin):
            for packet in vout.encode(frame.reformat(format="yuv420p")):
                out.mux(packet)
        for packet in vout.encode():
            out.mux(packet)
    Path(str(dst) + ".part").rename(dst)


def split_h264(src: Path, first: Path, second: Path, at: int = 476) -> None:
    """Two H.264 clips of `src`: frames before `at`, and the rest. The INT8 calibration
    example calibrates on the first and measures agreement on the second
    (docs/models.md)."""
    import av

    with (
        av.open(str(src)) as inp,
        av.open(str(first), "w", format="mp4") as a,
        av.open(str(second), "w", format="mp4") as b,
    ):
        vin = inp.streams.video[0]
        outs = []
        for out in (a, b):
            vout = out.add_stream("libx264", rate=vin.average_rate or 10)
            vout.width, vout.height = vin.codec_context.width, vin.codec_context.height
            vout.pix_fmt = "yuv420p"
            vout.options = {"g": "10", "crf": "18", "preset": "veryfast"}
            outs.append((out, vout))
        for i, decoded in enumerate(inp.decode(vin)):
            out, vout = outs[0 if i < at else 1]
            frame = decoded.reformat(format="yuv420p")
            frame.pts = None
            for packet in vout.encode(frame):
                out.mux(packet)
        for out, vout in outs:
            for packet in vout.encode():
                out.mux(packet)


def main() -> int:
    if not fetch_avi():
        return 0
    mp4 = DATA / "vtest.mp4"
    if not mp4.exists():
        transcode_h264(DATA / "vtest.avi", mp4)
    if not (DATA / "vtest_b.mp4").exists():
        split_h264(DATA / "vtest.avi", DATA / "vtest_a.mp4", DATA / "vtest_b.mp4")
    print(f"test_data: {DATA / 'vtest.avi'} and {mp4} ready")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
