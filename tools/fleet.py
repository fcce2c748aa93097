"""Real `strata edge` and `strata device` processes on loopback, and a results counter.

Used by the routing benchmark (`strata bench routing`) and the routing
tests: edges on fixed ports (a killed one comes back at the same address), a device agent
with several edges and synthetic cameras, and one SUB socket on every edge's PUB that
records each result (camera, sequence, session, which edge, when).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.shared.contracts import frame_pb2
from strata.shared.curve import ClientKeys
from strata.shared.loopback import free_port

from .subscriber import ResultSubscriber

STRATA = [sys.executable, "-m", "strata.tools.cli"]


class EdgeProc:
    """`strata edge` with its own config, on ports fixed at construction."""

    def __init__(
        self,
        name: str,
        tmp: Path,
        model: str = "",
        input_size: int = 160,
        weight: float = 1.0,
        extra: str = "",
    ) -> None:
        self.name = name
        self.listen = f"tcp://127.0.0.1:{free_port()}"
        self.publish = f"tcp://127.0.0.1:{free_port()}"
        self.cfg = tmp / f"{name}.yaml"
        path = f"    path: {model}\n" if model else ""
        self.cfg.write_text(
            "logging:\n  level: WARNING\n"
            f"edge:\n  edge_id: {name}\n  listen: {self.listen}\n  publish: {self.publish}\n"
            f"  weight: {weight}\n"
            f"  model:\n{path}    input_size: {input_size}\n"
            "  batching:\n    max_queue_delay_ms: 2\n" + extra
        )
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*STRATA, "edge", "--config", str(self.cfg)], stdout=out, stderr=out
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Send a signal (SIGSTOP for a hang, SIGCONT to end it)."""
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def synthetic_source(seed: int, fps: int, frames: int, size: tuple[int, int] = (160, 120)) -> str:
    """A paced synthetic camera."""
    w, h = size
    return f"synthetic://?frames={frames}&seed={seed}&width={w}&height={h}&fps={fps}&realtime=1"


class DeviceProc:
    """`strata device` with several edges and a camera list in its config file."""

    def __init__(
        self,
        tmp: Path,
        edges: list[str],
        cameras: dict[str, str],
        routing: dict[str, float] | None = None,
        loop: bool = False,
        processes: int = 0,
    ) -> None:
        """`processes`: `device.processes` (0, auto: one worker per 8 cameras, at most one per
        core). Each worker runs its own ring over its own cameras, so `routing.load_factor`
        bounds each worker's share, not the host's: a test that counts cameras per edge
        against the bound runs one process."""
        self.tmp = tmp
        self.cfg = tmp / "device.yaml"
        self.metrics_file = tmp / "device.prom"
        self.log = tmp / "device.log"
        self.edges = edges
        self.routing = routing or {}
        self.loop = loop
        self.processes = processes
        self.write_cameras(cameras)
        self.proc: subprocess.Popen[bytes] | None = None

    def write_cameras(self, cameras: dict[str, str]) -> None:
        """Rewrite the config with these cameras (id -> source); SIGHUP makes it count."""
        lines = [
            "logging:\n  level: INFO\n",
            f"device:\n  agent_id: fleet\n  processes: {self.processes}\n",
            "  edges:\n" + "".join(f"    - {e}\n" for e in self.edges),
            "  routing:\n" + "".join(f"    {k}: {v}\n" for k, v in self.routing.items())
            if self.routing
            else "",
            f"  source:\n    loop: {str(self.loop).lower()}\n",
            "  motion:\n    enabled: false\n",
            "  gate:\n    enabled: false\n",
            "  cascade:\n    enabled: false\n",
            # Frames wait rather than being dropped at the source: every one is counted.
            "  degrade:\n    enabled: false\n",
            "  sender:\n    ack_timeout_s: 2.0\n    drain_timeout_s: 15.0\n",
            "  cameras:\n"
            + "".join(f"    - id: {k}\n      source: '{v}'\n" for k, v in cameras.items()),
        ]
        tmp = self.cfg.with_suffix(".new")
        tmp.write_text("".join(lines))
        os.replace(tmp, self.cfg)

    def start(self, duration_s: float | None = None) -> None:
        cmd = [*STRATA, "device", "--config", str(self.cfg), "--metrics-file"]
        cmd.append(str(self.metrics_file))
        if duration_s:
            cmd += ["--duration", str(duration_s)]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=out)

    def hup(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout_s: float = 40.0) -> int:
        """SIGTERM (it drains), wait; the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def metric(self, name: str, **labels: str) -> float:
        """A sample from the metrics file written at exit (summed over unmatched labels)."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for fam in text_string_to_metric_families(self.metrics_file.read_text()):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total


@dataclass(frozen=True, slots=True)
class Result:
    """One published result."""

    at: float
    edge: str
    camera: str
    session: int
    sequence: int
    redelivery: bool


class Results(ResultSubscriber):
    """Every result published by any of the edges (one SUB socket connected to all)."""

    def __init__(self, publishers: list[str], curve: ClientKeys | None = None) -> None:
        self.items: list[Result] = []
        super().__init__(publishers, reconnect_ms=20, curve=curve)

    def on_result(self, msg: frame_pb2.FrameDetections, received_ns: int) -> None:
        self.items.append(
            Result(
                time.monotonic(),
                msg.edge_id,
                msg.camera_id,
                msg.session_id,
                msg.sequence,
                msg.redelivery,
            )
        )

    def snapshot(self) -> list[Result]:
        with self.lock:
            return list(self.items)

    def placement(self, since: float) -> dict[str, str]:
        """camera -> the edge that published its latest result after `since`."""
        out: dict[str, str] = {}
        for r in self.snapshot():
            if r.at >= since:
                out[r.camera] = r.edge
        return out

    def sequences(self) -> dict[str, set[int]]:
        """camera -> the distinct sequences published (any edge)."""
        out: dict[str, set[int]] = {}
        for r in self.snapshot():
            out.setdefault(r.camera, set()).add(r.sequence)
        return out


def wait_until(pred: Any, timeout_s: float, step_s: float = 0.1) -> bool:
    """Poll `pred()` until true or the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return bool(pred())


def gaps(seqs: set[int]) -> list[int]:
    """Sequences missing between the lowest and highest published (a lost frame)."""
    if not seqs:
        return []
    return [s for s in range(min(seqs), max(seqs) + 1) if s not in seqs]
