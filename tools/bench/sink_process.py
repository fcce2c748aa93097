"""The benches' stand-in edge (strata.device.transport.sink.FrameSink) in a process of its own.

An agent measured against a sink in its own process paid for the sink's work: parsing
every frame, building and sending every ack (about 0.1 ms a frame on vtest) in its CPU
time, and the sink's Python under the agent's GIL, which with dozens of cameras is a lock
every camera thread waits on. An edge node runs on another host; here it runs beside the
agent on the same cores (what it costs in wall time stays in the figure) but its CPU time
and its GIL are its own, reported apart (`SinkReport.cpu_seconds`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

# How long the child may take to import and bind before the bench gives up.
_START_S = 30.0


@dataclass(frozen=True, slots=True)
class StandInEdge:
    """What the stand-in edge tells each camera in its first ack, as an edge node does:
    its detector's input side (`model_input`, 0: none; the default agent scales frames to
    fit it) and the calibrated gap (`gap`, 0: no advice; FrameSink says what it does)."""

    model_input: int = 0
    gap: int = 0


SILENT = StandInEdge()  # says nothing: full-size frames, every frame with motion kept


@dataclass(frozen=True, slots=True)
class SinkReport:
    """What the sink saw, and the CPU time its process spent."""

    frames: int = 0
    duplicates: int = 0
    malformed: int = 0
    bytes: int = 0
    cpu_seconds: float = 0.0


def serve(endpoint: str, edge: StandInEdge) -> int:
    """The child: bind, say `ready` on stdout, serve until stdin says anything (or
    closes), then print the SinkReport as one JSON line."""
    from strata.device.transport.sink import FrameSink

    try:
        side = edge.model_input
        sink = FrameSink(endpoint, keep_log=False, model_input=(side, side), gap=edge.gap)
        sink.start()
    except Exception as exc:  # the parent raises it with the endpoint
        print(f"error {exc}", flush=True)
        return 1
    print("ready", flush=True)
    cpu = time.process_time()
    sys.stdin.readline()
    sink.stop()
    s = sink.stats
    report = SinkReport(s.frames, s.duplicates, s.malformed, s.bytes, time.process_time() - cpu)
    print(json.dumps(asdict(report)), flush=True)
    return 0


class SinkProcess:
    """A FrameSink bound to `endpoint` in a child process (`python -m` this module: no
    multiprocessing, so any script may call it), for the length of a `with`; `report`
    holds its totals once the block has ended."""

    def __init__(self, endpoint: str, edge: StandInEdge = SILENT) -> None:
        self.endpoint = endpoint
        self.edge = edge
        self.report = SinkReport()
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> SinkProcess:
        e = self.edge
        cmd = [sys.executable, "-m", __name__, self.endpoint, str(e.model_input), str(e.gap)]
        proc = self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # "ready", "error ...", or "" if it died
        if line != "ready":
            proc.kill()
            proc.wait(5.0)
            raise RuntimeError(f"sink process could not serve {self.endpoint}: {line or 'died'}")
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if line:
                self.report = SinkReport(**json.loads(line))
        finally:
            try:
                proc.wait(_START_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], StandInEdge(int(sys.argv[2]), int(sys.argv[3]))))
