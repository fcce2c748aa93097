"""The settle journal on real files: one write per flush, read back as settled streams,
torn and foreign lines skipped and counted, nothing written lost to a kill -9."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from strata.edge.flow.ledger import SettledRun, SettledStream
from strata.edge.state.journal import JournalRead, SettleJournal, read_journal
from strata.shared.contracts import frame_pb2

OK = frame_pb2.ACK_STATUS_PROCESSED
SHED = frame_pb2.ACK_STATUS_SHED


def test_added_frames_reach_the_file_only_at_flush_and_read_back_by_stream(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state" / "edge.checkpoint.json.journal"  # its folder is made
    j = SettleJournal(path)
    try:
        j.add(7, "cam-a", 1, OK, "")
        j.add(7, "cam-a", 2, SHED, "deadline: late")
        j.add(9, "cam-b", 5, OK, "")
        assert path.read_bytes() == b""  # held until the batch is done
        j.flush()
        assert len(path.read_text().splitlines()) == 3
        j.flush()  # nothing new: nothing written
        assert len(path.read_text().splitlines()) == 3
        j.add(7, "cam-a", 3, OK, "")
        j.flush()
    finally:
        j.close()
    got = read_journal(path)
    assert got.frames == 4 and got.bad_lines == 0
    assert sorted(got.streams, key=lambda s: s.camera_id) == [
        SettledStream(
            7,
            "cam-a",
            (
                SettledRun(1, 1, OK, ""),
                SettledRun(2, 2, SHED, "deadline: late"),
                SettledRun(3, 3, OK),
            ),
        ),
        SettledStream(9, "cam-b", (SettledRun(5, 5, OK),)),
    ]
    only_b = read_journal(path, cameras={"cam-b"})
    assert only_b.frames == 1 and [s.camera_id for s in only_b.streams] == ["cam-b"]


def test_reset_empties_the_file_and_close_flushes(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j = SettleJournal(path)
    j.add(1, "cam", 1, OK, "")
    j.flush()
    j.add(1, "cam", 2, OK, "")  # added before the checkpoint: the checkpoint holds it
    j.reset()
    assert path.read_bytes() == b""
    j.add(1, "cam", 3, OK, "")
    j.close()
    j.close()  # twice is harmless
    assert read_journal(path).streams == [SettledStream(1, "cam", (SettledRun(3, 3, OK),))]
    # The next life appends to what the last one left.
    again = SettleJournal(path)
    again.add(1, "cam", 4, OK, "")
    again.close()
    assert read_journal(path).frames == 2


def test_a_torn_or_foreign_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j = SettleJournal(path)
    j.add(1, "cam", 1, OK, "")
    j.close()
    with path.open("a", encoding="utf-8") as f:
        f.write('["not", "a", "journal", "line", 0]\n')
        f.write("garbage \xff\n")
        f.write('[1,"cam",2,1,""]\n')
        f.write('[1,"cam",3,')  # the write a power cut tore
    got = read_journal(path)
    assert got.frames == 2 and got.bad_lines == 3
    assert [r.first for r in got.streams[0].runs] == [1, 2]


def test_a_missing_journal_holds_nothing(tmp_path: Path) -> None:
    assert read_journal(tmp_path / "absent") == JournalRead([], 0, 0)


def test_a_write_that_fails_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (every write fails with ENOSPC)")
    j = SettleJournal(Path("/dev/full"))
    try:
        j.add(1, "cam", 1, OK, "")
        with caplog.at_level(logging.ERROR, "strata.edge.state.journal"):
            j.flush()
        assert "settle journal /dev/full not written" in caplog.text
    finally:
        j.close()


_KILLED = """
import os, signal, sys
from pathlib import Path
from strata.edge.state.journal import SettleJournal
j = SettleJournal(Path(sys.argv[1]))
for seq in range(1, 51):
    j.add(3, "cam", seq, 1, "")
    if seq % 10 == 0:
        j.flush()  # once per batch of 10
j.add(3, "cam", 51, 1, "")  # added, never flushed: lost, as its result was not acked
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_was_flushed_survives_a_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "j"
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED, str(path)], capture_output=True, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    got = read_journal(path)
    assert got.bad_lines == 0
    assert [r.first for r in got.streams[0].runs] == list(range(1, 51))
