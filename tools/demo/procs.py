"""Daemons as child processes: started with their logs in files, stopped with SIGINT first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class TierExitedError(RuntimeError):
    """A daemon exited while the demo still needed it."""

    def __init__(self, name: str, returncode: int, tail: list[str]) -> None:
        lines = "\n    ".join(tail) if tail else "(no output)"
        super().__init__(
            f"{name} exited with status {returncode}; its last log lines:\n    {lines}"
        )
        self.name = name
        self.returncode = returncode
        self.tail = tail


@dataclass
class TierProcess:
    """One `strata <tier> ...` child process; its stdout and stderr go to `log_path`."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    # Another command line instead of `strata ARGS` (tests use it).
    command: list[str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    @property
    def argv(self) -> list[str]:
        """The full command line."""
        if self.command is not None:
            return list(self.command)
        return [sys.executable, "-m", "strata.tools.cli", *self.args]

    def start(self) -> None:
        """Start it in its own session, so a Ctrl-C in the terminal reaches only the demo."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        """Process id once started."""
        return self.popen.pid if self.popen else None

    def returncode(self) -> int | None:
        """Exit status, or None while it runs (or before it started)."""
        return None if self.popen is None else self.popen.poll()

    def running(self) -> bool:
        """Started and not exited."""
        return self.popen is not None and self.popen.poll() is None

    def tail(self, n: int = 15) -> list[str]:
        """The last `n` lines of its log."""
        try:
            with self.log_path.open("rb") as f:
                lines: deque[bytes] = deque(f, maxlen=n)
        except OSError:
            return []
        return [line.decode("utf-8", "replace").rstrip() for line in lines]

    def check(self) -> None:
        """Raise TierExitedError if it has exited."""
        rc = self.returncode()
        if rc is not None:
            raise TierExitedError(self.name, rc, self.tail())

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGINT (a clean shutdown), then SIGTERM, then SIGKILL; returns the exit status."""
        p = self.popen
        if p is None:
            return None
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if p.poll() is not None:
                break
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                p.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        if self._log is not None:
            self._log.close()
            self._log = None
        return p.poll()
