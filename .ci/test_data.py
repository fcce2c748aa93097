"""Fetch the real test clip: OpenCV's vtest.avi from Debian's opencv-doc, plus an H.264 copy.

Writes data/vtest.avi and data/vtest.mp4 (GOP 10). Idempotent; without apt it says so and
the tests that need the clip skip. `--unseen` also writes data/unseen/*.mp4: the package's
other clips (an animated film's scene, a hand moving a cup, a box, a tree in wind), footage
the project was not tuned on, for `strata bench cascade --footage` (no test needs them).
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
DOC = "usr/share/doc/opencv-doc"
MEMBER = f"{DOC}/examples/data/vtest.avi"
# The package's other clips -> their names under data/unseen/ (.gz ones are gunzipped).
UNSEEN = {
    f"{DOC}/examples/data/Megamind.avi": "megamind",
    f"{DOC}/opencv4/html/cup.mp4.gz": "cup",
    f"{DOC}/opencv4/html/box.mp4.gz": "box",
    f"{DOC}/examples/data/tree.avi": "tree",
}


def fetch_avi(unseen: bool = False) -> bool:
    """Download opencv-doc with apt and unpack vtest.avi (and with `unseen` the package's
    other clips, as H.264) into data/."""
    want_unseen = unseen and not all(
        (DATA / "unseen" / f"{n}.mp4").exists() for n in UNSEEN.values()
    )
    if (DATA / "vtest.avi").exists() and not want_unseen:
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
        if want_unseen:
            write_unseen(Path(tmp))
    return True


def write_unseen(unpacked: Path) -> None:
    """data/unseen/NAME.mp4: each of UNSEEN transcoded to H.264 (GOP 10) at its own rate."""
    (DATA / "unseen").mkdir(exist_ok=True)
    for member, name in UNSEEN.items():
        src = unpacked / member
        if src.suffix == ".gz":
            with gzip.open(src) as zipped, open(src.with_suffix(""), "wb") as plain:
                shutil.copyfileobj(zipped, plain)
            src = src.with_suffix("")
        transcode_h264(src, DATA / "unseen" / f"{name}.mp4", renumber=True)


def transcode_h264(src: Path, dst: Path, gop: int = 10, renumber: bool = False) -> None:
    """H.264 copy with PyAV (no ffmpeg binary needed); `renumber`: frames get the encoder's
    own timestamps (an AVI's B-frame stamps are not an MP4's)."""
    import av

    with av.open(str(src)) as inp, av.open(str(dst) + ".part", "w", format="mp4") as out:
        vin = inp.streams.video[0]
        rate = vin.average_rate or 10
        if renumber:
            # A whole rate: an odd fraction (26777/1000) leaves the muxer's stamps off.
            rate = max(1, round(rate))
        vout = out.add_stream("libx264", rate=rate)
        vout.width, vout.height = vin.codec_context.width, vin.codec_context.height
        vout.pix_fmt = "yuv420p"
        vout.options = {"g": str(gop), "crf": "20", "preset": "veryfast"}
        for i, decoded in enumerate(inp.decode(vin)):
            frame = decoded.reformat(format="yuv420p")
            if renumber:
                frame.pts, frame.time_base = i, Fraction(1, int(rate))
            for packet in vout.encode(frame):
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
    if not fetch_avi(unseen="--unseen" in sys.argv[1:]):
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
