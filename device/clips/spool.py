"""The clips folder: every clip file with its sidecar, the device's spool of clips.

Each clip file `<dir>/<camera>/<session>-<n>.mp4` has a sidecar beside it (`.clip`, the
`ClipInfo` protobuf), written atomically (a temporary file renamed over it): when the
file gets its first packet (not final), when a track joins the clip, and when it ends
(final, after the file is synced). A clip that wrote nothing (no keyframe, a codec MP4
cannot carry) has a final sidecar and no file, so its reason still reaches the cloud.

At start (`recover`) the folder tells what a previous run left: a clip file whose
sidecar is not final (or missing) was cut short by a stop or a crash; it becomes final
as CUT_SHORT ("the device stopped mid-clip"), its end read from the file, and is uploaded
like any other. The tracks of the clips that ended properly are remembered, so a demand
that still names them does not cut them twice.

Bound: `clips.upload.spool_max_mib` over all clip files, uploaded or not; beyond it the
oldest finished clips are deleted (`enforce`), each counted
(strata_device_clips_spool_dropped_total) and logged with its age. Open clips are never
deleted. The uploader (device/clips/uploader.py) deletes a clip once the cloud holds it.

Threads: the journal side runs on camera threads (the ring's lock held), the rest on the
uploader's: one lock around the entries.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strata.shared.config.device import ClipsConfig
from strata.shared.contracts import clips_pb2

from ..metrics import DeviceMetrics

log = logging.getLogger(__name__)

SIDECAR = ".clip"
CUT_SHORT = "the device stopped mid-clip"


@dataclass(slots=True)
class SpooledClip:
    """One clip in the folder: its file (may not exist: nothing written), its sidecar,
    its latest ClipInfo, and its place in upload order (capture ns of its start, or the
    file's time)."""

    path: Path
    info: clips_pb2.ClipInfo
    order: int

    @property
    def clip_id(self) -> str:
        return self.info.clip_id

    @property
    def sidecar(self) -> Path:
        return self.path.with_suffix(SIDECAR)

    def size(self) -> int:
        """Bytes of the file now (0: none)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0


def write_sidecar(path: Path, info: clips_pb2.ClipInfo, sync: bool) -> None:
    """`info` beside the clip file `path`, atomically (synced when `sync`)."""
    sidecar = path.with_suffix(SIDECAR)
    tmp = sidecar.with_name(sidecar.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(info.SerializeToString())
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, sidecar)


def read_sidecar(path: Path) -> clips_pb2.ClipInfo | None:
    """The ClipInfo beside clip file `path` (None: none, or unreadable)."""
    try:
        return clips_pb2.ClipInfo.FromString(path.with_suffix(SIDECAR).read_bytes())
    except (OSError, ValueError):
        return None


def _sync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ClipSpool:
    """The clips folder (see the module docstring); the cutters' `ClipJournal`."""

    def __init__(
        self, cfg: ClipsConfig, agent_id: str, metrics: DeviceMetrics | None = None
    ) -> None:
        self.dir = Path(cfg.dir)
        self.max_bytes = int(cfg.upload.spool_max_mib * 2**20)
        self.agent_id = agent_id
        self._m = metrics
        self._lock = threading.Lock()
        self._clips: dict[str, SpooledClip] = {}
        # Per camera, the tracks a previous run's clips served in full.
        self.served: dict[str, set[str]] = {}

    # ---- the cutters' journal (camera threads) --------------------------------------------

    def opened(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        self._keep(path, info, sync=False)

    def changed(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        self._keep(path, info, sync=False)

    def done(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        _sync(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._keep(path, info, sync=True)

    def _keep(self, path: Path, info: clips_pb2.ClipInfo, sync: bool) -> None:
        info.agent_id = self.agent_id
        write_sidecar(path, info, sync)
        with self._lock:
            old = self._clips.get(info.clip_id)
            order = old.order if old is not None else info.start_ns or time.time_ns()
            self._clips[info.clip_id] = SpooledClip(path, info, order)

    # ---- start ----------------------------------------------------------------------------

    def recover(self, owns: Callable[[str], bool] = lambda _: True) -> list[SpooledClip]:
        """Take in what a previous run left in the folder (see the module docstring): the
        clips of the cameras `owns` says are this agent's (worker processes share a folder)."""
        found: list[SpooledClip] = []
        if not self.dir.is_dir():
            return found

        def mine(path: Path) -> bool:
            return owns(urllib.parse.unquote(path.parent.name))

        for tmp in self.dir.glob(f"*/*{SIDECAR}.tmp"):  # a sidecar a crash left half-written
            if mine(tmp):
                tmp.unlink(missing_ok=True)
        paths = {p.with_suffix(".mp4") for p in self.dir.glob(f"*/*{SIDECAR}")}
        paths |= set(self.dir.glob("*/*.mp4"))
        for path in sorted(p for p in paths if mine(p)):
            clip = self._recovered(path)
            if clip is None:
                continue
            found.append(clip)
            if clip.info.outcome != clips_pb2.CLIP_OUTCOME_CUT_SHORT:
                self.served.setdefault(clip.info.camera_id, set()).update(clip.info.track_uids)
        with self._lock:
            for clip in found:
                self._clips.setdefault(clip.clip_id, clip)
        if found:
            short = sum(c.info.outcome == clips_pb2.CLIP_OUTCOME_CUT_SHORT for c in found)
            log.warning(
                "clips folder %s: %d clip(s) of a previous run to upload, %d cut short",
                self.dir,
                len(found),
                short,
            )
        return found

    def _recovered(self, path: Path) -> SpooledClip | None:
        info = read_sidecar(path)
        exists = path.exists()
        if info is None and not exists:
            return None
        mtime = path.stat().st_mtime_ns if exists else time.time_ns()
        if info is None:  # the file started, its first sidecar never came
            camera = urllib.parse.unquote(path.parent.name)
            session, _, n = path.stem.rpartition("-")
            info = clips_pb2.ClipInfo(clip_id=f"{camera}/{session}/{n}", camera_id=camera)
        if not info.final:
            info.agent_id = info.agent_id or self.agent_id
            info.outcome = clips_pb2.CLIP_OUTCOME_CUT_SHORT
            info.reason = CUT_SHORT
            info.size_bytes = path.stat().st_size if exists else 0
            if info.start_ns:
                info.end_ns = info.start_ns + _duration_ns(path)
            info.final = True
            write_sidecar(path, info, sync=True)
        return SpooledClip(path, info, info.start_ns or mtime)

    # ---- the uploader's side ----------------------------------------------------------------

    def pending(self) -> list[SpooledClip]:
        """Every clip in the folder, oldest first."""
        with self._lock:
            clips = list(self._clips.values())
        return sorted(clips, key=lambda c: (c.order, c.clip_id))

    def remove(self, clip: SpooledClip) -> None:
        """The clip is gone: the cloud holds it, or the bound let it go."""
        with self._lock:
            self._clips.pop(clip.clip_id, None)
        for p in (clip.path, clip.sidecar):
            p.unlink(missing_ok=True)

    def enforce(self) -> int:
        """Delete the oldest finished clips while the folder is over its bound; the bytes
        left (also the spool gauge)."""
        clips = self.pending()
        sizes = {c.clip_id: c.size() for c in clips}
        total = sum(sizes.values())
        for clip in clips:
            if total <= self.max_bytes:
                break
            if not clip.info.final or not sizes[clip.clip_id]:
                continue
            self.remove(clip)
            total -= sizes[clip.clip_id]
            age_s = (time.time_ns() - clip.order) / 1e9
            log.warning(
                "clip %s (%d bytes, %.0f s old) deleted before upload: the clips folder is "
                "over clips.upload.spool_max_mib (%.0f MiB)",
                clip.clip_id,
                sizes[clip.clip_id],
                age_s,
                self.max_bytes / 2**20,
            )
            if self._m is not None:
                self._m.clips_spool_dropped.inc()
        if self._m is not None:
            self._m.clip_spool_bytes.set(total)
        return total


def _duration_ns(path: Path) -> int:
    """Span of the frames a (maybe truncated) clip file holds, first to last shown."""
    import av

    first = last = None
    try:
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            tb = stream.time_base
            for packet in c.demux(stream):
                if packet.pts is None or tb is None:
                    continue
                t = float(packet.pts * tb)
                first = t if first is None else min(first, t)
                last = t if last is None else max(last, t)
    except (av.FFmpegError, IndexError, OSError):
        pass  # a cut-short file ends mid-fragment: what was read counts
    if first is None or last is None:
        return 0
    return int((last - first) * 1e9)
