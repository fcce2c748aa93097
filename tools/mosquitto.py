"""A mosquitto MQTT broker of its own, for benchmarks: a config file written in a directory,
a free 127.0.0.1 port, stopped and started again on the same port and persistence file.

Needs Debian's `mosquitto` package. With `persistent`, the broker keeps the sessions and
queued QoS 1 messages of persistent clients across a stop and a start (a subscriber with
clean_session off misses nothing that the broker acked to a publisher).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from strata.shared.loopback import free_port

HOW_TO_GET = "mosquitto not found: install Debian's `mosquitto` package (`bash .ci/system-deps`)"


class MosquittoUnavailableError(RuntimeError):
    """No mosquitto binary here (the message says how to get one)."""


def find_mosquitto() -> str | None:
    """The mosquitto binary; None when it is not installed."""
    found = shutil.which("mosquitto")
    if found:
        return found
    return "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").is_file() else None


@dataclass
class Mosquitto:
    """One broker on 127.0.0.1:port, configured and logging under `root`."""

    root: Path
    persistent: bool = True
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """The broker's own log (errors and warnings)."""
        return self.root / "mosquitto.log"

    def start(self, timeout_s: float = 10.0) -> Mosquitto:
        """Write the config (first time) and start; returns once the port accepts."""
        binary = find_mosquitto()
        if binary is None:
            raise MosquittoUnavailableError(HOW_TO_GET)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        lines = [
            f"listener {self.port} 127.0.0.1",
            f"persistence {'true' if self.persistent else 'false'}",
            f"persistence_location {self.root}/",
            "allow_anonymous true",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
        ]
        if os.geteuid() == 0:  # as root it would switch to its own user, who cannot write here
            lines.append("user root")
        conf = self.root / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [binary, "-c", str(conf)], stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while not self._listening():
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mosquitto exited at start: {tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mosquitto did not listen on {self.port} in {timeout_s:g} s")
            time.sleep(0.05)
        return self

    def _listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        """SIGTERM (it saves its persistence file), SIGKILL after 10 s."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
