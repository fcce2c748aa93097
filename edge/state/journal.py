"""The settle journal: every frame's final status since the last checkpoint, on disk.

A checkpoint is written every `checkpoint.interval_s` (minutes); a node killed between two
would forget which frames it had already published, and their resends (the agent holds a
frame until its final ack) would be processed twice. So the worker appends each settled
frame here, one JSON line per frame, written once per batch with a single `write()` on an
O_APPEND file: a `kill -9` loses nothing already written (the page cache outlives the
process; a power cut may lose the last lines, as the spool's synchronous=NORMAL does).
A checkpoint holds everything settled so far, so the journal starts empty after each.

Frames are journaled only after their result is published: a frame found here was
published, one missing may have been (it is then processed again, flagged redelivery),
never the reverse. A torn or foreign last line is skipped and counted by the reader.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from strata.edge.flow.ledger import SettledRun, SettledStream

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JournalRead:
    """What a journal held: the settled frames as streams, and the lines skipped."""

    streams: list[SettledStream]
    frames: int
    bad_lines: int


class SettleJournal:
    """Append-only record of settled frames (worker thread adds; a lock for safety)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def add(self, session_id: int, camera_id: str, sequence: int, status: int, reason: str) -> None:
        """One settled frame (kept in memory until `flush`)."""
        line = json.dumps([session_id, camera_id, sequence, status, reason], separators=(",", ":"))
        with self._lock:
            self._lines.append(line)

    def flush(self) -> None:
        """Write what was added, in one write (once per batch)."""
        with self._lock:
            if not self._lines:
                return
            data = ("\n".join(self._lines) + "\n").encode()
            self._lines.clear()
            try:
                os.write(self._fd, data)
            except OSError as exc:
                log.error("settle journal %s not written: %s", self.path, exc)

    def reset(self) -> None:
        """Empty it (a checkpoint holding all of it was just written)."""
        with self._lock:
            self._lines.clear()
            try:
                os.ftruncate(self._fd, 0)
            except OSError as exc:
                log.error("settle journal %s not emptied: %s", self.path, exc)

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_journal(path: Path, cameras: set[str] | None = None) -> JournalRead:
    """The settled frames a journal holds (of these cameras, or all); missing: none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return JournalRead([], 0, 0)
    per: dict[tuple[int, str], list[SettledRun]] = {}
    bad = frames = 0
    for line in text.splitlines():
        try:
            session, cam, seq, status, reason = json.loads(line)
            if not (
                isinstance(session, int)
                and isinstance(cam, str)
                and isinstance(seq, int)
                and isinstance(status, int)
                and isinstance(reason, str)
            ):
                raise ValueError("types")
        except (ValueError, TypeError):
            bad += 1  # a torn last line (power cut) or not a journal line
            continue
        if cameras is not None and cam not in cameras:
            continue
        frames += 1
        per.setdefault((session, cam), []).append(SettledRun(seq, seq, status, reason))
    streams = [SettledStream(k[0], k[1], tuple(v)) for k, v in per.items()]
    return JournalRead(streams, frames, bad)
